package queuebench_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/internal/queuebench"
	"github.com/dcsync/dcsync/layout"
	"github.com/dcsync/dcsync/store/hbase"
)

// floorResult is one run of the group-start floor: C consumers at once, each taking
// its own P/C fresh partitions with one batched acquire and one batched claim.
type floorResult struct {
	wall     time.Duration // from the first call to the last reply
	acquired time.Duration // from the first call to the last AcquireLocks reply
	calls    queuebench.Calls
}

func (r floorResult) String() string {
	return fmt.Sprintf("wall %v (last acquire replied at %v); calls %v",
		r.wall.Round(time.Millisecond), r.acquired.Round(time.Millisecond), r.calls)
}

// scaleFloor measures the least store work a group of c consumers on p partitions
// needs to start: c goroutines released together, goroutine i taking partitions
// i*p/c .. (i+1)*p/c-1 (fresh locks, named as package queue names partition locks,
// in a queue made for the run) with exactly one driver.AcquireLocks and one
// driver.ClaimQueuePartitions with the tokens it got: the calls a consumer would make
// if it knew the final membership from the start and nobody contended. The locks are
// released afterwards, outside the clock.
func scaleFloor(t *testing.T, s driver.Store, p, c int) floorResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := fmt.Sprintf("floor-%d-%d-%d", p, c, time.Now().UnixNano()%1e9)
	if err := s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: p, Groups: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	counts := queuebench.NewCounts()
	reqs := make([][]driver.LockAcquire, c)
	for i := range reqs {
		for n := i * p / c; n < (i+1)*p/c; n++ {
			reqs[i] = append(reqs[i], driver.LockAcquire{
				Key:   dcsync.Key{Level: dcsync.XDC, Client: "dcsync", Farm: "local", Name: fmt.Sprintf("queue:%d:%s1:gp/%d", len(name), name, n)},
				Owner: fmt.Sprintf("%s-c%d", name, i),
				TTL:   time.Minute,
			})
		}
	}
	// Warm up, outside the clock: the tables' regions located, the queue's spec known
	// (reads only: the locks stay fresh).
	var keys []dcsync.Key
	var ps []int
	for i := range reqs {
		for j, q := range reqs[i] {
			keys, ps = append(keys, q.Key), append(ps, i*p/c+j)
		}
	}
	if _, err := driver.InspectLocks(ctx, s, keys); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadQueueOffsets(ctx, name, "g", ps); err != nil {
		t.Fatal(err)
	}
	stores := make([]driver.Store, c)
	for i := range stores {
		stores[i] = queuebench.Count(s, counts)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lastAcq  time.Time
		lastDone time.Time
		errs     []error
	)
	gate := make(chan struct{})
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			res, err := driver.AcquireLocks(ctx, stores[i], reqs[i])
			acq := time.Now()
			if err != nil {
				fail(err)
				return
			}
			claims := make([]driver.QueueClaim, 0, len(res))
			for j, r := range res {
				if r.Err != nil {
					fail(fmt.Errorf("consumer %d: lock %v: %w", i, reqs[i][j].Key, r.Err))
					return
				}
				claims = append(claims, driver.QueueClaim{P: i*p/c + j, Token: r.State.Token})
			}
			cres, err := driver.ClaimQueuePartitions(ctx, stores[i], name, "g", claims)
			done := time.Now()
			if err == nil {
				for j, r := range cres {
					if r.Err != nil {
						err = fmt.Errorf("consumer %d: claim of partition %d: %w", i, claims[j].P, r.Err)
						break
					}
				}
			}
			if err != nil {
				fail(err)
			}
			mu.Lock()
			if acq.After(lastAcq) {
				lastAcq = acq
			}
			if done.After(lastDone) {
				lastDone = done
			}
			mu.Unlock()
		}()
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	r := floorResult{wall: lastDone.Sub(start), acquired: lastAcq.Sub(start), calls: counts.Snapshot()}
	for i := range reqs {
		rel := make([]driver.LockRelease, len(reqs[i]))
		for j, q := range reqs[i] {
			rel[j] = driver.LockRelease{Key: q.Key, Owner: q.Owner}
		}
		if _, err := driver.ReleaseLocks(ctx, s, rel); err != nil {
			t.Logf("releasing the floor's locks: %v", err)
		}
	}
	for _, err := range errs {
		t.Error(err)
	}
	return r
}

// rawFloor is HBase's own cost of what the group start writes: c goroutines released
// together, each with p/c fresh rows of the lock table (salted as lock rows are), on
// the hbaserpc client alone. Plain: one MultiMutate of a conditional Put per row ("D:L
// absent": put D:L), then a second (D:L equal to what the first put: put D:O): two
// conditional writes per partition and no read. With dcsync's shape, the four calls
// the store makes (on the lock table only): a MultiGet of two cells per row (its D:F
// and an earlier counter's), the take (per row a conditional RowMutations "D:L
// absent" of a Put of L, O, E with a TTL and an Increment of D:F at version 2^62,
// with the row and the row raw read back), a MultiGet of one cell per row (the claim's
// read), and a conditional Put per row (the claim's compare-and-set). The rows are
// deleted afterwards.
func rawFloor(t *testing.T, zk string, p, c int, shape bool) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := hbaserpc.Dial(ctx, hbaserpc.Config{ZKQuorum: zk})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	table := hbase.DefaultLockTable // created by the store's floor run before
	fam := []byte(layout.HBaseLockFamily)
	qL, qO, qE, qF, marker := []byte("L"), []byte("O"), []byte("E"), []byte("F"), []byte("M")
	run := fmt.Sprintf("dcsync-rawfloor-%d", time.Now().UnixNano())
	rows := make([][][]byte, c)
	for i := range rows {
		for n := i * p / c; n < (i+1)*p/c; n++ {
			rows[i] = append(rows[i], layout.Salt(fmt.Sprintf("%s-%d", run, n)))
		}
	}
	// Warm up, outside the clock: every region located (reads only).
	var gets []hbaserpc.Get
	for _, rs := range rows {
		for _, row := range rs {
			gets = append(gets, hbaserpc.Get{Row: row}, hbaserpc.Get{Row: layout.Salt("F#" + string(row))})
		}
	}
	if _, err := cl.MultiGet(ctx, table, gets); err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lastDone time.Time
		errs     []error
	)
	gate := make(chan struct{})
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			owner := []byte(fmt.Sprint("c", i))
			first := make([]hbaserpc.Action, len(rows[i]))
			second := make([]hbaserpc.Action, len(rows[i]))
			var counters, claims []hbaserpc.Get
			absent, taken := hbaserpc.IfAbsent(fam, qL), hbaserpc.IfEquals(fam, qL, marker)
			for j, row := range rows[i] {
				first[j] = hbaserpc.Action{Mutation: &hbaserpc.Put{Row: row, Values: []hbaserpc.Value{{Family: fam, Qualifier: qL, Value: marker}}}, Cond: &absent}
				second[j] = hbaserpc.Action{Mutation: &hbaserpc.Put{Row: row, Values: []hbaserpc.Value{{Family: fam, Qualifier: qO, Value: owner}}}, Cond: &taken}
				if shape {
					first[j].Mutation = &hbaserpc.Put{Row: row, Values: []hbaserpc.Value{{Family: fam, Qualifier: qL, Value: marker}, {Family: fam, Qualifier: qO, Value: owner},
						{Family: fam, Qualifier: qE, Value: []byte("\x00\x00\x01\x00\x00\x00\x00\x00")}}, TTL: time.Minute}
					first[j].More = []hbaserpc.Mutation{&hbaserpc.Increment{Deltas: []hbaserpc.Delta{{Family: fam, Qualifier: qF, Amount: 1}}, Timestamp: 1 << 62}}
					first[j].Gets = []hbaserpc.Get{{Columns: []hbaserpc.Column{{Family: fam}}}, {Raw: true, MaxVersions: 8}}
					col := []hbaserpc.Column{{Family: fam, Qualifier: qF}}
					counters = append(counters, hbaserpc.Get{Row: row, Columns: col}, hbaserpc.Get{Row: layout.Salt("F#" + string(row)), Columns: col})
					claims = append(claims, hbaserpc.Get{Row: row, Columns: []hbaserpc.Column{{Family: fam, Qualifier: qO}}})
				}
			}
			var err error
			for step, batch := range [][]hbaserpc.Action{first, second} {
				if shape {
					if _, err = cl.MultiGet(ctx, table, [][]hbaserpc.Get{counters, claims}[step]); err != nil {
						break
					}
				}
				var res []hbaserpc.ActionResult
				if res, err = cl.MultiMutate(ctx, table, batch); err != nil {
					break
				}
				for j, r := range res {
					if !r.Applied {
						err = fmt.Errorf("raw floor: goroutine %d, row %d not applied", i, j)
						break
					}
				}
				if err != nil {
					break
				}
			}
			done := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if done.After(lastDone) {
				lastDone = done
			}
		}()
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	wall := lastDone.Sub(start)
	var del []hbaserpc.Action
	for _, rs := range rows {
		for _, row := range rs {
			// At 2^62: the counter the shape's takes created is at that version.
			del = append(del, hbaserpc.Action{Mutation: &hbaserpc.Delete{Row: row, Timestamp: 1 << 62}})
		}
	}
	if _, err := cl.MultiMutate(ctx, table, del); err != nil {
		t.Logf("deleting the raw floor's rows: %v", err)
	}
	for _, err := range errs {
		t.Error(err)
	}
	return wall
}

// TestScaleFloor measures the floor of a group start: for P partitions and C consumers
// (default 4,096 and 64; DCSYNC_QUEUE_SCALE_P and _C as for TestScaleMatrix), on each
// store of the scale matrix (DCSYNC_QUEUE_SCALE_STORES narrows them), the wall time of
// C consumers each taking its P/C fresh partitions with one batched acquire and one
// batched claim (scaleFloor); on HBase also the raw client's time for the two
// conditional writes per partition, and for the store's calls of that start made on the
// raw client (rawFloor). It runs only with DCSYNC_QUEUE_SCALE=1:
//
//	DCSYNC_QUEUE_SCALE=1 DCSYNC_QUEUE_SCALE_STORES=hbase go test -run TestScaleFloor -v ./internal/queuebench/
func TestScaleFloor(t *testing.T) {
	if os.Getenv("DCSYNC_QUEUE_SCALE") != "1" {
		t.Skip("set DCSYNC_QUEUE_SCALE=1 to run the group-start floor")
	}
	stores := scaleStores(t)
	only := os.Getenv("DCSYNC_QUEUE_SCALE_STORES")
	for _, name := range []string{"memory", "sqlite", "hbase", "aerospike"} {
		s, ok := stores[name]
		if !ok || (only != "" && !strings.Contains(only, name)) {
			continue
		}
		for _, p := range ints("DCSYNC_QUEUE_SCALE_P", []int{4096}) {
			for _, c := range ints("DCSYNC_QUEUE_SCALE_C", []int{64}) {
				r := scaleFloor(t, s, p, c)
				t.Logf("FLOOR store=%s P=%d C=%d %v", name, p, c, r)
				if name == "hbase" {
					raw := rawFloor(t, os.Getenv("DCSYNC_HBASE_ZK"), p, c, false)
					t.Logf("FLOOR store=hbase-raw P=%d C=%d wall %v (%d conditional Puts in %d MultiMutates of %d)",
						p, c, raw.Round(time.Millisecond), 2*(p/c*c), 2*c, p/c)
					raw = rawFloor(t, os.Getenv("DCSYNC_HBASE_ZK"), p, c, true)
					t.Logf("FLOOR store=hbase-raw-shape P=%d C=%d wall %v (dcsync's calls on the raw client: per consumer MultiGet, take, MultiGet, conditional Puts)",
						p, c, raw.Round(time.Millisecond))
				}
			}
		}
	}
}
