package queuebench_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/queuebench"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
	"github.com/dcsync/dcsync/storeurl"
)

// scaleStores opens the stores of the scale matrix: memory and SQLite always, HBase and
// Aerospike when DCSYNC_HBASE_ZK / DCSYNC_AEROSPIKE name a server (namespace "test").
func scaleStores(t *testing.T) map[string]driver.Store {
	ctx := context.Background()
	out := map[string]driver.Store{"memory": memory.New()}
	sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "scale.db"))
	if err != nil {
		t.Fatal(err)
	}
	out["sqlite"] = sq
	if zk := os.Getenv("DCSYNC_HBASE_ZK"); zk != "" {
		s, err := storeurl.Open(ctx, "hbase://"+zk)
		if err != nil {
			t.Fatal(err)
		}
		out["hbase"] = s
	}
	if as := os.Getenv("DCSYNC_AEROSPIKE"); as != "" {
		s, err := storeurl.Open(ctx, "aerospike://"+as+"/test")
		if err != nil {
			t.Fatal(err)
		}
		out["aerospike"] = s
	}
	t.Cleanup(func() {
		for _, s := range out {
			s.Close()
		}
	})
	return out
}

func ints(env string, def []int) []int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		var n int
		fmt.Sscan(f, &n)
		out = append(out, n)
	}
	return out
}

// TestScaleMatrix measures an idle group's store calls/s, the calls and time to start
// it and the time to balance, for P partitions x C consumers on every store available.
// It runs only with DCSYNC_QUEUE_SCALE=1 (P and C default to {16, 256, 4096} x {1, 8,
// 64}; DCSYNC_QUEUE_SCALE_P, _C and _STORES narrow them, DCSYNC_QUEUE_SCALE_IDLE sets
// the idle window, DCSYNC_QUEUE_SCALE_BATCH=1 adds driver.LockBatcher, one lock at a
// time, to stores without it, to count the calls a batching store would see, and
// DCSYNC_QUEUE_SCALE_HANDLES spreads the consumers over that many store handles, or one
// each with "each", to start the group as that many processes would):
//
//	DCSYNC_QUEUE_SCALE=1 go test -run TestScaleMatrix -v -timeout 2h ./internal/queuebench/
func TestScaleMatrix(t *testing.T) {
	if os.Getenv("DCSYNC_QUEUE_SCALE") != "1" {
		t.Skip("set DCSYNC_QUEUE_SCALE=1 to run the scale matrix")
	}
	idle := 10 * time.Second
	if v := os.Getenv("DCSYNC_QUEUE_SCALE_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		idle = d
	}
	within := 2 * time.Minute
	if v := os.Getenv("DCSYNC_QUEUE_SCALE_WITHIN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		within = d
	}
	stores := scaleStores(t)
	only := os.Getenv("DCSYNC_QUEUE_SCALE_STORES")
	for _, name := range []string{"memory", "sqlite", "hbase", "aerospike"} {
		s, ok := stores[name]
		if !ok || (only != "" && !strings.Contains(only, name)) {
			continue
		}
		if os.Getenv("DCSYNC_QUEUE_SCALE_BATCH") == "1" {
			s = queuebench.EmulateBatches(s)
		}
		for _, p := range ints("DCSYNC_QUEUE_SCALE_P", []int{16, 256, 4096}) {
			for _, c := range ints("DCSYNC_QUEUE_SCALE_C", []int{1, 8, 64}) {
				h := 1
				if os.Getenv("DCSYNC_QUEUE_SCALE_HANDLES") == "each" {
					h = c
				} else if hs := ints("DCSYNC_QUEUE_SCALE_HANDLES", nil); len(hs) > 0 {
					h = hs[0]
				}
				r := queuebench.Scale(t, queuebench.ScaleConfig{Store: s, Partitions: p, Consumers: c, Idle: idle, BalanceWithin: within,
					Trace: os.Getenv("DCSYNC_QUEUE_SCALE_TRACE") == "1", Handles: h})
				t.Logf("SCALE store=%s P=%d C=%d handles=%d %v", name, p, c, h, r)
			}
		}
	}
}

// An idle group's store calls do not grow with its partitions: with P = 16 and P = 256
// (C = 4, on memory, with driver.LockBatcher emulated so that a batch counts as the one
// call a batching store receives), each membership read is one call carrying at most
// C + 48 slots, not P, and the other calls (renewals apart) are bounded by the
// membership reads, the same bound for both P. The bounds count calls per read, not per
// second: a slow machine makes fewer reads, and fewer calls. Renewals (RefreshLock, one
// per lock per lease/3, or one RefreshLocks per interval once package lock batches
// them) are logged, not checked here.
func TestScaleIdleCallsDoNotGrowWithP(t *testing.T) {
	s := memory.New()
	defer s.Close()
	const c = 4
	for _, p := range []int{16, 256} {
		r := queuebench.Scale(t, queuebench.ScaleConfig{Store: queuebench.EmulateBatches(s), Partitions: p, Consumers: c,
			Poll: 20 * time.Millisecond, Idle: time.Second, BalanceWithin: time.Minute})
		t.Logf("P=%d C=%d: %v", p, c, r)
		if r.Balanced < 0 {
			t.Fatalf("P=%d C=%d: not balanced within a minute", p, c)
		}
		idle := r.IdleCalls
		reads := idle["InspectLocks/member"]
		if reads == 0 {
			t.Fatalf("P=%d: no membership read in %v of idle", p, r.IdleFor)
		}
		if keys := idle["InspectLocks/member.keys"]; keys > reads*(c+48) {
			t.Errorf("P=%d: %d member slots read in %d membership reads, want at most %d per read (C + 48, not P)", p, keys, reads, c+48)
		}
		if n := idle["InspectLock"]; n > 0 {
			t.Errorf("P=%d: %d single lock inspections while idle, want none (membership is read in batches)", p, n)
		}
		other := idle.Total() - idle["RefreshLock"] - idle["RefreshLocks"] - idle["InspectLocks"]
		if limit := reads + 8*c; other > limit {
			t.Errorf("P=%d: %d idle calls besides renewals and %d membership reads (%v), want at most %d", p, other, reads, idle, limit)
		}
	}
}

// A consumer joining a group is handed its share within a few of its own membership
// reads (each a poll interval apart): the owner sees it at its next read and releases
// at once what it no longer owns (nothing is in flight), and the joiner takes it at its
// next. Counted in the joiner's reads, not in time: a slow machine slows both loops
// alike. Before, the owner read the membership once per lease/3 (3.3 s) while the
// joiner retried every 200 ms: it made more than 10 attempts before it was served.
func TestJoinerServedWithinAFewMembershipReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	s := queuebench.EmulateBatches(base)
	opts := []queue.Option{queue.WithLease(10 * time.Second), queue.WithPollInterval(20 * time.Millisecond)}
	q1, err := queue.Create(ctx, s, queue.Spec{Name: "join", Partitions: 4, Groups: []string{"g"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := q1.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(context.Background())
	for len(c1.Partitions()) < 4 {
		if ctx.Err() != nil {
			t.Fatal("the first consumer never owned the 4 partitions")
		}
		time.Sleep(5 * time.Millisecond)
	}
	counts := queuebench.NewCounts()
	q2, err := queue.Open(ctx, queuebench.Count(s, counts), "join", opts...)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := q2.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(context.Background())
	for len(c2.Partitions()) < 2 || len(c1.Partitions()) > 2 {
		if ctx.Err() != nil {
			t.Fatalf("not balanced: %v and %v", c1.Partitions(), c2.Partitions())
		}
		time.Sleep(2 * time.Millisecond)
	}
	calls := counts.Snapshot()
	t.Logf("the joiner was served after %d membership reads: %v", calls["InspectLocks/member"], calls)
	if n := calls["InspectLocks/member"]; n > 10 {
		t.Errorf("the joiner made %d membership reads before it was served, want at most 10", n)
	}
}

// A consumer of a full group (every member slot taken) backs off: it tries no slot
// while its read finds none free, and reads the slots again at most once per 8 poll
// intervals once backed off. The bound counts the reads a doubling, jittered backoff can make in
// the time that passed (a slow machine only lowers the count); retrying every poll
// interval would make 100 in 2 s.
func TestFullGroupStandbyBacksOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	s := queuebench.EmulateBatches(base)
	const poll = 20 * time.Millisecond
	opts := []queue.Option{queue.WithLease(10 * time.Second), queue.WithPollInterval(poll)}
	q1, err := queue.Create(ctx, s, queue.Spec{Name: "full", Partitions: 1, Groups: []string{"g"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := q1.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(context.Background())
	for len(c1.Partitions()) < 1 {
		if ctx.Err() != nil {
			t.Fatal("the first consumer never owned the partition")
		}
		time.Sleep(5 * time.Millisecond)
	}
	counts := queuebench.NewCounts()
	q2, err := queue.Open(ctx, queuebench.Count(s, counts), "full", opts...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c2, err := q2.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	calls := counts.Snapshot()
	waited := time.Since(start)
	c2.Close(context.Background())
	t.Logf("a standby's calls in %v: %v", waited, calls)
	if n := calls["AcquireLock/member"]; n > 0 {
		t.Errorf("the standby tried %d member slots of a full group, want none", n)
	}
	// Waits are jittered down to 0.8 of the backoff.
	if n, limit := calls["InspectLocks/member"], int64(waited/(8*poll*8/10))+6; n > limit {
		t.Errorf("the standby read the slots %d times in %v, want at most %d (backing off to 8 intervals of %v)", n, waited, limit, poll)
	}
}

// Partitions move in batches on a store with driver.LockMover and driver.QueueClaimer
// (memory): a consumer taking many partitions takes their locks in one AcquireLocks and
// claims them in one ClaimQueuePartitions per round, and one handing many over frees
// them in one ReleaseLocks per round; no partition lock is taken, claimed or freed one
// at a time. Counted in calls per membership read (each round makes at most one of
// each), not in time.
func TestPartitionMovesAreBatched(t *testing.T) {
	s := memory.New()
	defer s.Close()
	const p, c = 64, 4
	r := queuebench.Scale(t, queuebench.ScaleConfig{Store: s, Partitions: p, Consumers: c,
		Poll: 20 * time.Millisecond, Idle: 100 * time.Millisecond, BalanceWithin: time.Minute})
	t.Logf("P=%d C=%d: %v", p, c, r)
	if r.Balanced < 0 {
		t.Fatalf("P=%d C=%d: not balanced within a minute", p, c)
	}
	calls := r.StartCalls
	for _, op := range []string{"AcquireLock/partition", "ClaimQueuePartition", "ReleaseLock"} {
		if n := calls[op]; n > 0 {
			t.Errorf("%d %s calls while the group formed, want none (partitions move in batches)", n, op)
		}
	}
	rounds := calls["InspectLocks/member"]
	// Releases: a group forming together may hand nothing over (each member waits for
	// the membership to hold before it takes: queue's settleRounds);
	// TestHandOverIsOneBatchedRelease counts them.
	if calls["AcquireLocks"] == 0 || calls["ClaimQueuePartitions"] == 0 {
		t.Fatalf("no batched acquire or claim while %d consumers shared %d partitions: %v", c, p, calls)
	}
	// The locks taken in batches: at least every partition once.
	if n := calls["AcquireLocks.keys"] - calls["AcquireLocks/partition.unavailable"]; n < p {
		t.Errorf("%d partition locks taken in batches, want at least %d", n, p)
	}
	for _, op := range []string{"AcquireLocks", "ClaimQueuePartitions", "ReleaseLocks"} {
		if n := calls[op]; n > rounds+c {
			t.Errorf("%d %s calls in %d membership reads, want at most one per read", n, op, rounds)
		}
	}
}

// A consumer handing partitions over to a joiner frees their locks in one batched
// ReleaseLocks per round, none one at a time: the first consumer owns all 64
// partitions, a second joins, and the first's calls while it hands 32 over are
// counted.
func TestHandOverIsOneBatchedRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	const p = 64
	opts := []queue.Option{queue.WithLease(10 * time.Second), queue.WithPollInterval(20 * time.Millisecond)}
	counts := queuebench.NewCounts()
	q1, err := queue.Create(ctx, queuebench.Count(s, counts), queue.Spec{Name: "handover", Partitions: p, Groups: []string{"g"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := q1.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(context.Background())
	for len(c1.Partitions()) < p {
		if ctx.Err() != nil {
			t.Fatal("the first consumer never owned every partition")
		}
		time.Sleep(2 * time.Millisecond)
	}
	before := counts.Snapshot()
	q2, err := queue.Open(ctx, s, "handover", opts...)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := q2.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(context.Background())
	for len(c2.Partitions()) < p/2 || len(c1.Partitions()) > p/2 {
		if ctx.Err() != nil {
			t.Fatalf("not balanced: %d and %d partitions", len(c1.Partitions()), len(c2.Partitions()))
		}
		time.Sleep(2 * time.Millisecond)
	}
	calls := counts.Snapshot().Sub(before)
	t.Logf("the first consumer's calls while it handed %d partitions over: %v", p/2, calls)
	if n := calls["ReleaseLock"]; n > 0 {
		t.Errorf("%d single ReleaseLock calls while handing partitions over, want none", n)
	}
	if calls["ReleaseLocks"] == 0 || calls["ReleaseLocks.keys"] < p/2 {
		t.Errorf("%d ReleaseLocks of %d locks, want at least one, freeing at least %d", calls["ReleaseLocks"], calls["ReleaseLocks.keys"], p/2)
	}
	if n, rounds := calls["ReleaseLocks"], calls["InspectLocks/member"]; n > rounds {
		t.Errorf("%d ReleaseLocks calls in %d membership reads, want at most one per read", n, rounds)
	}
}

// Consumers of one process joining one group together (each with its own queue handle,
// on the process's one store handle) try distinct member slots: each
// takes a slot with its first try, none loses a race to another of the process (with
// no consumer elsewhere, every try succeeds). Before, all of them tried the lowest free
// slot at once, one won per round, and the rest retried (1,894 tries to start 64).
// Counted in tries, not in time.
func TestJoinersOfOneProcessTrySlotsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	const consumers, partitions = 16, 32
	opts := []queue.Option{queue.WithLease(10 * time.Second), queue.WithPollInterval(20 * time.Millisecond)}
	if _, err := queue.Create(ctx, base, queue.Spec{Name: "joiners", Partitions: partitions, Groups: []string{"g"}}, opts...); err != nil {
		t.Fatal(err)
	}
	counts := queuebench.NewCounts()
	s := queuebench.Count(base, counts) // the process's store handle
	cs := make([]*queue.Consumer, consumers)
	var wg sync.WaitGroup
	errs := make([]error, consumers)
	for i := range cs {
		q, err := queue.Open(ctx, s, "joiners", opts...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[i], errs[i] = q.Consumer(ctx, "g")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		defer cs[i].Close(context.Background())
	}
	for {
		done := true
		for _, c := range cs {
			done = done && len(c.Partitions()) == partitions/consumers
		}
		if done {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the group never balanced")
		}
		time.Sleep(5 * time.Millisecond)
	}
	calls := counts.Snapshot()
	t.Logf("member slot tries: %d, lost: %d", calls["AcquireLock/member"], calls["AcquireLock/member/unavailable"])
	if n := calls["AcquireLock/member"]; n != consumers {
		t.Errorf("%d consumers of one process made %d member slot tries, want one each", consumers, n)
	}
}
