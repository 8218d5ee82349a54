package hbase

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// javaCreate creates k's farm cell as the Java library does (HBaseLatchStorage.java:80-82):
// an Increment with a TTL, no lifetime marker.
func javaCreate(t *testing.T, ctx context.Context, s *Store, k dcsync.Key, count int64, ttl time.Duration) {
	t.Helper()
	_, err := shared(t).Increment(ctx, s.latchTable, &hbaserpc.Increment{Row: latchRow(k),
		Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: []byte("count_" + k.Farm), Amount: count}}, TTL: ttl})
	must(t, err, "Java-style create")
}

// laneCells counts the op lanes in k's row.
func laneCells(t *testing.T, ctx context.Context, s *Store, k dcsync.Key) int {
	t.Helper()
	cells, err := shared(t).Get(ctx, s.latchTable, latchRow(k))
	must(t, err, "Get")
	n := 0
	for _, c := range cells {
		if isOpLane(c.Qualifier) {
			n++
		}
	}
	return n
}

// TestLatchJavaCellNoLane (real HBase): dcsync writes no op lane into the row of a latch
// a Java client created (no lifetime marker), on every path that updates one (DC, XDC
// from a farm with a cell, XDC from a farm without one), so that nothing of dcsync's
// outlives the Java latch's cells (TestReviewExpiredJavaLatchIsMissingToJavaXDC checks
// the Java reader's view); the updates still count exactly, and an update of a latch
// dcsync created still uses one.
func TestLatchJavaCellNoLane(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	javaCreate(t, ctx, s, k, 10, time.Minute)
	x, other := k, k
	x.Level, other.Level, other.Farm = dcsync.XDC, dcsync.XDC, "dc2"
	for i, u := range []dcsync.Key{k, k, x, other, other} {
		if _, err := s.AddLatch(ctx, u, -1); err != nil {
			t.Fatalf("update %d (%s): %v", i, u, err)
		}
	}
	if got := readCount(t, s, k); got != 7 {
		t.Fatalf("dc1's count %d after 3 count-downs of 10, want 7", got)
	}
	if got := readCount(t, s, x); got != 5 {
		t.Fatalf("XDC count %d, want 5", got)
	}
	if n := laneCells(t, ctx, s, k); n != 0 {
		t.Fatalf("%d op lanes in the row of a Java-created latch, want none", n)
	}
	d := key(dcsync.DC, "dc1")
	must(t, s.CreateLatch(ctx, d, 10, time.Minute), "create")
	_, err := s.AddLatch(ctx, d, -1)
	must(t, err, "count-down")
	if n := laneCells(t, ctx, s, d); n != 1 {
		t.Fatalf("%d op lanes in the row of a dcsync latch, want 1", n)
	}
}

// TestLatchJavaCellInDoubt (real HBase): an update of a latch a Java client created,
// which goes without an op lane, whose reply is lost (the server applied it) is neither
// resent by the store nor by the client (its condition reads the column it increments)
// and fails with Connection, outcome unknown: applied exactly once. On each path: DC,
// XDC from a farm with a cell, XDC from a farm without one (whose condition was "another
// farm's cell present" alone, which the client resends: with it, the hook sees a second
// write).
func TestLatchJavaCellInDoubt(t *testing.T) {
	shared(t)
	ctx := ctxT(t, 2*time.Minute)
	// The reply hook: when armed, it lets skip write replies (Mutate, Multi: the read
	// with the server's clock is a Multi) through, drops the next, and counts those
	// after it.
	var armed, skip, after atomic.Int32
	drop := func(method string) bool {
		if method != "Mutate" && method != "Multi" || armed.Load() == 0 {
			return false
		}
		if armed.Load() == 2 {
			after.Add(1)
			return false
		}
		if skip.Add(-1) >= 0 {
			return false
		}
		armed.Store(2)
		return true
	}
	hooked, err := hbaserpc.Dial(ctx, hbaserpc.Config{ZKQuorum: zkQuorum(t), Logger: testLogger(), DropReply: drop})
	must(t, err, "Dial")
	defer hooked.Close()
	s, err := New(ctx, hooked, Config{LockTable: fixture.lockTable, LatchTableSuffix: fixture.latchSuffix, Logger: testLogger()})
	must(t, err, "New")
	defer s.Close()
	plain := openStore(t)
	defer plain.Close()
	for _, tc := range []struct {
		name  string
		level dcsync.Level
		farm  string
	}{
		{"DC", dcsync.DC, "dc1"},
		{"XDC", dcsync.XDC, "dc1"},
		{"XDCNewFarm", dcsync.XDC, "dc2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := key(dcsync.DC, "dc1")
			javaCreate(t, ctx, plain, base, 10, time.Minute)
			k := base
			k.Level, k.Farm = tc.level, tc.farm
			before := readCount(t, plain, k)
			skip.Store(1) // the read's reply passes
			after.Store(0)
			armed.Store(1)
			_, err := s.AddLatch(ctx, k, -1)
			state, n := armed.Swap(0), after.Load()
			if state != 2 {
				t.Fatal("no reply was dropped")
			}
			wantCode(t, err, dcsync.Connection, "AddLatch whose reply was lost")
			if n != 0 {
				t.Fatalf("%d more writes sent after the lost reply: the update was resent", n)
			}
			if got := readCount(t, plain, k); got != before-1 {
				t.Fatalf("count went from %d to %d after one count-down applied once", before, got)
			}
			if n := laneCells(t, ctx, plain, k); n != 0 {
				t.Fatalf("%d op lanes in the row, want none", n)
			}
		})
	}
}
