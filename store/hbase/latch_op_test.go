package hbase

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// replayWrites wraps the real client and, for the conditional writes it is armed for,
// plays a retry that reaches a region server which does not know the first attempt's
// nonce (the region moved cleanly after the first attempt was applied): it sends the
// write (applied; its reply "lost"), then sends the very same write again and returns
// that second reply. Each hbaserpc call draws a nonce of its own, so the server cannot
// deduplicate the second by its nonce, exactly as the region's new server cannot.
type replayWrites struct {
	ops
	mu      sync.Mutex
	armed   int    // conditional writes still to replay
	applied []bool // whether each replayed write's first send was applied
}

func (w *replayWrites) arm(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.applied = n, nil
}

func (w *replayWrites) take() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed == 0 {
		return false
	}
	w.armed--
	return true
}

func (w *replayWrites) first(ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied = append(w.applied, ok)
}

func (w *replayWrites) firstApplied() []bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]bool(nil), w.applied...)
}

func (w *replayWrites) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	if w.take() {
		ok, _, err := w.ops.CheckAndMutate(ctx, table, row, cond, muts...)
		w.first(ok && err == nil)
	}
	return w.ops.CheckAndMutate(ctx, table, row, cond, muts...)
}

func (w *replayWrites) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error) {
	if w.take() {
		ok, _, _, err := w.ops.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
		w.first(ok && err == nil)
	}
	return w.ops.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
}

// readCount returns k's count as stored.
func readCount(t *testing.T, s *Store, k dcsync.Key) int64 {
	t.Helper()
	got, err := s.ReadLatches(ctxT(t, time.Minute), []dcsync.Key{k})
	must(t, err, "ReadLatches")
	if !got[0].Found {
		t.Fatalf("latch %s not found", k)
	}
	return got[0].Count
}

// TestLatchUpdateResentAfterApplied (real HBase): a latch update whose first attempt
// was applied and whose resend reaches a region server that does not know the first
// attempt's nonce (docs/stores/hbase.md, "Exactly-once latch updates") moves the count
// by exactly delta and reports the count after it: the resend is refused by its op
// marker's condition and the store finds its marker in the row. On every path: the
// one-call DC update of a cell the store updated last, the DC and XDC updates planned
// from a read, and an XDC update creating its farm's cell. Without the op lane's
// condition the resend is applied again: a count-down counted twice. (A cell a Java
// client created has no lane and its update is never resent:
// TestLatchJavaCellInDoubt.)
func TestLatchUpdateResentAfterApplied(t *testing.T) {
	s := openStore(t)
	t.Cleanup(func() { s.Close() })
	w := &replayWrites{ops: s.db}
	s.db = w
	ctx := ctxT(t, 2*time.Minute)
	check := func(t *testing.T, k dcsync.Key, delta int64, calls int) {
		t.Helper()
		before := readCount(t, s, k)
		w.arm(calls)
		n, err := s.AddLatch(ctx, k, delta)
		must(t, err, "AddLatch")
		after := readCount(t, s, k)
		if fa := w.firstApplied(); len(fa) == 0 || !fa[0] {
			t.Fatalf("the first attempt was not applied (%v): nothing was replayed", fa)
		}
		if after != before+delta {
			t.Fatalf("count went from %d to %d after adding %d once (a resend applied again)", before, after, delta)
		}
		if n != after {
			t.Fatalf("AddLatch returned %d, the count is %d", n, after)
		}
	}
	t.Run("DCOneCall", func(t *testing.T) {
		k := key(dcsync.DC, "dc1")
		must(t, s.CreateLatch(ctx, k, 10, time.Minute), "create")
		_, err := s.AddLatch(ctx, k, -1) // the store now remembers the cell: one call
		must(t, err, "count-down")
		for i := 0; i < 3; i++ {
			check(t, k, -1, 1)
		}
		check(t, k, 2, 1)
	})
	t.Run("DCRead", func(t *testing.T) {
		k := key(dcsync.DC, "dc1")
		must(t, s.CreateLatch(ctx, k, 10, time.Minute), "create")
		check(t, k, -1, 1)
	})
	t.Run("XDC", func(t *testing.T) {
		k := key(dcsync.XDC, "dc1")
		must(t, s.CreateLatch(ctx, k, 10, time.Minute), "create")
		check(t, k, -1, 1)
		check(t, k, -3, 1)
		other := k
		other.Farm = "dc2" // its first update creates dc2's cell and marker
		check(t, other, -1, 1)
	})
}

// TestLatchUpdateInDoubt (real HBase): a latch update whose reply is lost (applied or
// not), or whose first attempt reaches the server only after the store read the row and
// just before its resend, is applied exactly once and reports the count after it; the
// store then goes on updating the cell in one call.
func TestLatchUpdateInDoubt(t *testing.T) {
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run(level.String(), func(t *testing.T) {
			s, f := faultyStore(t)
			ctx := ctxT(t, 2*time.Minute)
			k := key(level, "dc1")
			must(t, s.CreateLatch(ctx, k, 100, time.Minute), "create")
			want := int64(100)
			for _, plan := range [][]fault{{lostAck}, {notSent}, {notSent, lostAck}, {lostAck, pass}, {pass}, {lostAck}, {lostAck, lostAck}} {
				f.set(plan...)
				n, err := s.AddLatch(ctx, k, -1)
				must(t, err, "AddLatch with faults")
				want--
				if got := readCount(t, s, k); got != want || n != want {
					t.Fatalf("plan %v: AddLatch = %d, count %d; want %d", plan, n, got, want)
				}
			}
		})
	}
	t.Run("Late", func(t *testing.T) {
		s := openStore(t)
		h := holdWrites(t, s, true)
		ctx := ctxT(t, 2*time.Minute)
		for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
			k := key(level, "dc1")
			must(t, s.CreateLatch(ctx, k, 10, time.Minute), "create")
			want := int64(10)
			for i := 0; i < 3; i++ { // the first plans from a read, the others (DC) from memory
				h.holdAfter(0, latchRow(k))
				n, err := s.AddLatch(ctx, k, -1)
				must(t, err, "AddLatch whose first attempt lands late")
				want--
				if got := readCount(t, s, k); got != want || n != want {
					t.Fatalf("%s: AddLatch = %d, count %d; want %d", level, n, got, want)
				}
				if len(h.take()) != 0 {
					t.Fatal("a held write was never delivered")
				}
			}
		}
	})
}

// TestLatchOpLanes (real HBase): a store that updates a cell again and again uses one op
// lane for it, so the row holds one lane whatever the number of updates; concurrent
// updates by one store use one lane each. Readers skip lanes: an XDC latch whose row
// holds only a lane is not found.
func TestLatchOpLanes(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	c := shared(t)
	lanes := func(k dcsync.Key) int {
		t.Helper()
		cells, err := c.Get(ctx, s.latchTable, latchRow(k))
		must(t, err, "Get")
		n := 0
		for _, x := range cells {
			if isOpLane(x.Qualifier) {
				n++
			}
		}
		return n
	}
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := key(level, "dc1")
		must(t, s.CreateLatch(ctx, k, 100, time.Minute), "create")
		for i := 0; i < 10; i++ {
			_, err := s.AddLatch(ctx, k, -1)
			must(t, err, "count-down")
		}
		if n := lanes(k); n != 1 {
			t.Errorf("%s: %d op lanes in the row after 10 updates by one store, want 1", level, n)
		}
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 5; j++ {
					if _, err := s.AddLatch(ctx, k, -1); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if n := lanes(k); n < 1 || n > 4 {
			t.Errorf("%s: %d op lanes in the row after 4 goroutines' updates, want 1 to 4", level, n)
		}
		if got := readCount(t, s, k); got != 70 {
			t.Errorf("%s: count %d after 30 count-downs of 100, want 70", level, got)
		}
	}
	k := key(dcsync.XDC, "dc1")
	lane := s.latchMem.newLane()
	must(t, c.Put(ctx, s.latchTable, &hbaserpc.Put{Row: latchRow(k), Values: []hbaserpc.Value{{Family: famLatch, Qualifier: lane.qual, Value: make([]byte, 24)}}, TTL: time.Minute}), "put an op lane")
	got, err := s.ReadLatches(ctx, []dcsync.Key{k})
	must(t, err, "ReadLatches")
	if got[0] != (driver.LatchCount{}) {
		t.Fatalf("a row of an op lane only reads as %+v, want not found", got[0])
	}
	_, err = s.AddLatch(ctx, k, -1)
	wantCode(t, err, dcsync.NotFound, "AddLatch on a row of an op lane only")
	must(t, s.CreateLatch(ctx, k, 3, time.Minute), "XDC create over a row of an op lane only")
	if n := readCount(t, s, k); n != 3 {
		t.Fatalf("count %d, want 3", n)
	}
}

// TestLatchOpLaneLost (real HBase): a lane that no longer holds what the store left
// there (here deleted under it) is given up: the update goes on, once, in a new lane.
func TestLatchOpLaneLost(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	c := shared(t)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := key(level, "dc1")
		must(t, s.CreateLatch(ctx, k, 10, time.Minute), "create")
		_, err := s.AddLatch(ctx, k, -1)
		must(t, err, "count-down")
		cells, err := c.Get(ctx, s.latchTable, latchRow(k))
		must(t, err, "Get")
		for _, x := range cells {
			if isOpLane(x.Qualifier) {
				must(t, c.Delete(ctx, s.latchTable, &hbaserpc.Delete{Row: latchRow(k), Columns: []hbaserpc.Column{{Family: famLatch, Qualifier: x.Qualifier}}}), "delete the lane")
			}
		}
		n, err := s.AddLatch(ctx, k, -1)
		must(t, err, "count-down after the lane was lost")
		if got := readCount(t, s, k); got != 8 || n != 8 {
			t.Fatalf("%s: AddLatch = %d, count %d; want 8", level, n, got)
		}
	}
}
