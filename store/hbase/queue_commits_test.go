package hbase

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// lateMultis wraps a store's queue calls: the MultiMutate it is armed for is applied
// and reported in doubt (every action's outcome unknown: its reply lost; "apply"), or
// the whole call in doubt, without results ("apply-call"), or held (not sent, reported
// in doubt; "hold"); it is kept, to be sent again, or for the first time, by deliver,
// after whatever the store did meanwhile: a batch's attempt that lands late. Armed
// "fail", the call is not sent and every action fails without doubt.
type lateMultis struct {
	queueOps
	mu     sync.Mutex
	armed  string // "apply" or "hold"; "" passes the calls through
	kept   []func(context.Context) ([]hbaserpc.ActionResult, error)
	onHold func() // run when a MultiMutate is held, before its caller sees the error
}

func (w *lateMultis) arm(mode string, onHold func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.onHold = mode, onHold
}

func (w *lateMultis) MultiMutate(ctx context.Context, table string, acts []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	w.mu.Lock()
	mode, onHold := w.armed, w.onHold
	w.armed, w.onHold = "", nil
	if mode != "" && mode != "fail" {
		w.kept = append(w.kept, func(ctx context.Context) ([]hbaserpc.ActionResult, error) {
			return w.queueOps.MultiMutate(ctx, table, acts)
		})
	}
	w.mu.Unlock()
	switch mode {
	case "apply":
		if _, err := w.queueOps.MultiMutate(ctx, table, acts); err != nil {
			return nil, err
		}
		return lostReplies(len(acts))
	case "apply-call":
		if _, err := w.queueOps.MultiMutate(ctx, table, acts); err != nil {
			return nil, err
		}
		return nil, errLost
	case "fail":
		res := make([]hbaserpc.ActionResult, len(acts))
		err := driver.Errorf(dcsync.RetriesExhausted, "test", "injected: region not serving, attempts ran out")
		for i := range res {
			res[i].Err = err
		}
		return res, err
	case "hold":
		if onHold != nil {
			onHold()
		}
		return lostReplies(len(acts))
	}
	return w.queueOps.MultiMutate(ctx, table, acts)
}

// deliver sends the kept MultiMutates again and returns how many actions applied.
func (w *lateMultis) deliver(t *testing.T) int {
	t.Helper()
	w.mu.Lock()
	kept := w.kept
	w.kept = nil
	w.mu.Unlock()
	if len(kept) == 0 {
		t.Fatal("no MultiMutate was kept")
	}
	n := 0
	for _, send := range kept {
		res, err := send(ctxT(t, time.Minute))
		must(t, err, "delivering a kept MultiMutate")
		for _, r := range res {
			if r.Applied {
				n++
			}
		}
	}
	return n
}

// commitsQueue creates a queue of n partitions read by group "g" and has token 7 claim
// every partition through s (which then knows every offset cell); it returns the
// queue's name, the partitions and stored, which reads their offsets.
func commitsQueue(t *testing.T, s *Store, n int) (name string, ps []int, stored func() []driver.QueueOffset) {
	ctx := ctxT(t, time.Minute)
	name = qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: n, Groups: []string{"g"}})
	claims := make([]driver.QueueClaim, n)
	for p := range n {
		ps = append(ps, p)
		claims[p] = driver.QueueClaim{P: p, Token: 7}
	}
	res, err := s.ClaimQueuePartitions(ctx, name, "g", claims)
	must(t, err, "ClaimQueuePartitions")
	for _, r := range res {
		must(t, r.Err, "claim")
	}
	stored = func() []driver.QueueOffset {
		t.Helper()
		offs, err := s.ReadQueueOffsets(ctxT(t, time.Minute), name, "g", ps)
		must(t, err, "ReadQueueOffsets")
		return offs
	}
	return name, ps, stored
}

// commitsAt is the batch writing off to each of ps.
func commitsAt(ps []int, off driver.QueueOffset) []driver.QueueCommit {
	out := make([]driver.QueueCommit, len(ps))
	for i, p := range ps {
		out[i] = driver.QueueCommit{P: p, Off: off}
	}
	return out
}

// TestQueueCommitsLandLate (real HBase): a batch's MultiMutate that applied and whose
// reply was lost leaves each record to CommitQueueOffset's attempts, which find it
// stored (nil); sent again after the owner's next batch, it changes nothing (each
// write is conditioned on the cell it replaces, not on the owner's token alone). The
// same when the whole call is in doubt; a call that failed unsent is made again. A
// MultiMutate held in doubt while another token claims a partition makes that record's
// outcome unknown (Connection, not LockLost: the claim keeps Next and Version, so
// nothing stored tells whether the attempt landed first), the others are applied, and
// the held attempt, delivered after, changes nothing.
func TestQueueCommitsLandLate(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	name, ps, stored := commitsQueue(t, s, 4)
	w := &lateMultis{queueOps: s.client}
	s.queue().db = w
	batch := func(off driver.QueueOffset) []error {
		t.Helper()
		res, err := s.CommitQueueOffsets(ctx, name, "g", commitsAt(ps, off))
		must(t, err, fmt.Sprintf("CommitQueueOffsets %+v", off))
		return res
	}
	all := func(want driver.QueueOffset, what string) {
		t.Helper()
		for p, got := range stored() {
			if got != want {
				t.Fatalf("%s: partition %d holds %+v, want %+v", what, p, got, want)
			}
		}
	}

	v1 := driver.QueueOffset{Token: 7, Next: 5, Held: true, Version: 1}
	w.arm("apply", nil)
	for p, err := range batch(v1) {
		must(t, err, fmt.Sprintf("partition %d: a batch applied with its reply lost", p))
	}
	all(v1, "after the batch v1 applied with its reply lost")
	v2 := driver.QueueOffset{Token: 7, Next: 9, Held: true, Version: 2}
	for p, err := range batch(v2) {
		must(t, err, fmt.Sprintf("partition %d: batch v2", p))
	}
	if n := w.deliver(t); n != 0 {
		t.Errorf("the batch v1 sent again after the batch v2: %d actions applied, want 0", n)
	}
	all(v2, "after the batch v1 landed late, after v2 (else Next goes back from 9 to 5)")

	// The whole call in doubt, without results; then a call that failed, not sent.
	v21 := driver.QueueOffset{Token: 7, Next: 9, Held: true, Version: 21}
	w.arm("apply-call", nil)
	for p, err := range batch(v21) {
		must(t, err, fmt.Sprintf("partition %d: a batch applied, the call in doubt", p))
	}
	all(v21, "after the batch applied with the call in doubt")
	if n := w.deliver(t); n != 0 {
		t.Errorf("the batch v21 sent again: %d actions applied, want 0", n)
	}
	v22 := driver.QueueOffset{Token: 7, Next: 9, Held: true, Version: 22}
	w.arm("fail", nil)
	for p, err := range batch(v22) {
		must(t, err, fmt.Sprintf("partition %d: a batch whose call failed, not sent", p))
	}
	all(v22, "after the batch whose call failed")

	// Held in doubt while token 8 claims partition 1.
	other := openQueueStore(t)
	defer other.Close()
	v3 := driver.QueueOffset{Token: 7, Next: 10, Held: true, Version: 23}
	w.arm("hold", func() {
		_, err := other.ClaimQueuePartition(ctx, name, "g", 1, 8)
		must(t, err, "ClaimQueuePartition 8")
	})
	res := batch(v3)
	wantCode(t, res[1], dcsync.Connection, "a record in doubt whose partition another token then claimed")
	for _, p := range []int{0, 2, 3} {
		must(t, res[p], fmt.Sprintf("partition %d beside the record in doubt", p))
	}
	if n := w.deliver(t); n != 0 {
		t.Errorf("the held batch v3 delivered after its records finished: %d actions applied, want 0", n)
	}
	want := []driver.QueueOffset{v3, {Token: 8, Next: 9, Held: true, Version: 22}, v3, v3}
	for p, got := range stored() {
		if got != want[p] {
			t.Fatalf("after the held batch v3 landed: partition %d holds %+v, want %+v", p, got, want[p])
		}
	}
}

// TestQueueCommitsOneMulti (real HBase, one region server): CommitQueueOffsets of K
// partitions whose offset cells the store knows is one store call, one MultiMutate,
// one Multi RPC; a record whose cell another store changed meanwhile costs one more
// call (its refused attempt decides on the cell read back and writes again), and is
// applied; the others are not sent twice.
func TestQueueCommitsOneMulti(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	const k = 16
	name, ps, stored := commitsQueue(t, s, k)
	cnt := countCalls(s)
	ctx := ctxT(t, 2*time.Minute)
	for v := uint64(1); v <= 2; v++ {
		off := driver.QueueOffset{Token: 7, Next: 3 * v, Held: true, Version: v}
		cnt.take()
		before := shared(t).Calls()
		res, err := s.CommitQueueOffsets(ctx, name, "g", commitsAt(ps, off))
		must(t, err, "CommitQueueOffsets")
		if got, calls := rpcs(t, before), cnt.take(); sumCalls(calls) != 1 || calls["MultiMutate"] != 1 || got["Multi"] != 1 || len(got) != 1 {
			t.Errorf("CommitQueueOffsets of %d partitions (version %d): store calls %v, RPCs %v; want one MultiMutate, one Multi RPC", k, v, calls, got)
		}
		for p, err := range res {
			must(t, err, fmt.Sprintf("commit of partition %d", p))
		}
		for p, got := range stored() {
			if got != off {
				t.Fatalf("partition %d holds %+v, want %+v", p, got, off)
			}
		}
	}
	other := openQueueStore(t)
	defer other.Close()
	behind := driver.QueueOffset{Token: 7, Next: 7, Held: true, Version: 3}
	must(t, other.CommitQueueOffset(ctx, name, "g", 5, behind), "CommitQueueOffset through another store")
	off := driver.QueueOffset{Token: 7, Next: 9, Held: true, Version: 4}
	cnt.take()
	res, err := s.CommitQueueOffsets(ctx, name, "g", commitsAt(ps, off))
	must(t, err, "CommitQueueOffsets")
	if calls := cnt.take(); sumCalls(calls) != 2 || calls["MultiMutate"] != 1 || calls["CheckAndMutateRead"] != 1 {
		t.Errorf("CommitQueueOffsets of %d partitions, one changed by another store: store calls %v; want one MultiMutate and one CheckAndMutateRead", k, calls)
	}
	for p, err := range res {
		must(t, err, fmt.Sprintf("commit of partition %d", p))
	}
	for p, got := range stored() {
		if got != off {
			t.Fatalf("partition %d holds %+v, want %+v", p, got, off)
		}
	}
}

// BenchmarkQueueCommits (real HBase) measures the offsets of an Ack spanning K = 16
// partitions, three ways in one interleaved loop: CommitQueueOffsets (one
// MultiMutate), K CommitQueueOffset calls at most 8 at once (what the queue's
// writeMany did without the capability), and the floor: one raw CheckAndMutate of one
// offset cell. It reports each p50 and the batch's ratios to the others.
func BenchmarkQueueCommits(b *testing.B) {
	const k = 16
	s := openQueueStore(b)
	defer s.Close()
	ctx := context.Background()
	name := qname(b)
	if err := s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: 2 * k, Groups: []string{"g"}}); err != nil {
		b.Fatal(err)
	}
	claims := make([]driver.QueueClaim, 2*k)
	for p := range claims {
		claims[p] = driver.QueueClaim{P: p, Token: 7}
	}
	if _, err := s.ClaimQueuePartitions(ctx, name, "g", claims); err != nil {
		b.Fatal(err)
	}
	var batchPs, loopPs []int
	for p := range k {
		batchPs, loopPs = append(batchPs, p), append(loopPs, k+p)
	}
	raw := []byte("\x7fbench-offset-" + randHex(4))
	var rawCell []byte
	cnt := countCalls(s)
	var version uint64
	var lb, ll, lr []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		version++
		off := driver.QueueOffset{Token: 7, Next: version, Held: true, Version: version}
		t0 := time.Now()
		res, err := s.CommitQueueOffsets(ctx, name, "g", commitsAt(batchPs, off))
		if err != nil {
			b.Fatal(err)
		}
		for _, err := range res {
			if err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		errs := make([]error, k)
		for j, p := range loopPs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				errs[j] = s.CommitQueueOffset(ctx, name, "g", p, off)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		t2 := time.Now()
		next := encodeOffset(off)
		ok, _, err := s.client.CheckAndMutate(ctx, s.QueueTable(), raw, offsetCond(rawCell), &hbaserpc.Put{Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualOffset, Value: next}}})
		if err != nil || !ok {
			b.Fatalf("raw CheckAndMutate: %v, %v", ok, err)
		}
		rawCell = next
		lb, ll, lr = append(lb, t1.Sub(t0)), append(ll, t2.Sub(t1)), append(lr, time.Since(t2))
	}
	b.StopTimer()
	calls := cnt.take()
	mb, ml, mr := float64(median(lb)), float64(median(ll)), float64(median(lr))
	b.ReportMetric(mb, "batch-p50-ns")
	b.ReportMetric(ml, "loop8-p50-ns")
	b.ReportMetric(mr, "floor-p50-ns")
	b.ReportMetric(mb/ml, "batch/loop8")
	b.ReportMetric(mr/mb, "floor/batch")
	b.Logf("calls %v over %d rounds (batch + loop)", calls, b.N)
}
