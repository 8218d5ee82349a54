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
	"github.com/dcsync/dcsync/layout"
)

// serverNow returns a lower bound of the HBase server's clock (see
// hbaserpc.GetWithClock), probing next to row of table.
func serverNow(t *testing.T, ctx context.Context, table string, row []byte, family []byte) int64 {
	t.Helper()
	_, now, err := shared(t).GetWithClock(ctx, table, row, family)
	must(t, err, "GetWithClock")
	return now
}

// javaAcquire is the Java DLM acquire (HBaseStore.java:78-82): check-and-mutate "D:L
// absent", then put D:L = "M" stamped with the client's clock ts, with the lease as
// cell TTL.
func javaAcquire(t *testing.T, ctx context.Context, row []byte, ts int64, ttl time.Duration) bool {
	t.Helper()
	ok, _, err := shared(t).CheckAndMutate(ctx, fixture.lockTable, row, hbaserpc.IfAbsent(famLock, qualLock),
		&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualLock, Value: lockMarker}}, Timestamp: ts, TTL: ttl})
	must(t, err, "Java-style acquire")
	return ok
}

// TestReleaseNeverHidesNewerHolder: dcsync's release is stamped at the timestamp of
// the cells it owns (and writes no delete marker), so it cannot hide a Put the next
// holder makes after it, even one stamped (as the Java store stamps its Put, with its
// client's clock) at or before the server time of the release itself, or exactly at
// the version of the released cells.
func TestReleaseNeverHidesNewerHolder(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	for i := 0; i < 5; i++ {
		k := key(dcsync.XDC, "dc1")
		row := layout.HBaseLockRow(k)
		_, err := s.AcquireLock(ctx, k, "A", time.Minute)
		must(t, err, "A acquires")
		time.Sleep(5 * time.Millisecond)
		// A timestamp at or before the server time at which A's release lands, and
		// after A's own cells.
		ts := serverNow(t, ctx, s.lockTable, row, famLock)
		must(t, s.ReleaseLock(ctx, k, "A"), "A releases")
		if !javaAcquire(t, ctx, row, ts, time.Minute) {
			t.Fatal("B's if-absent acquire after A's release was refused")
		}
		in, err := s.InspectLock(ctx, k)
		if err != nil {
			t.Fatalf("round %d: B's lock (put at %d, after A's release) is invisible: %v", i, ts, err)
		}
		if in.Owner != "" {
			t.Fatalf("holder %+v, want the Java-style holder", in)
		}
		// B holds it: dcsync cannot take it.
		_, err = s.AcquireLock(ctx, k, "C", time.Minute)
		wantCode(t, err, dcsync.LockUnavailable, "acquire while B holds")
	}
	// A Put stamped exactly at the version of the released cells.
	k := key(dcsync.DC, "dc1")
	row := layout.HBaseLockRow(k)
	_, err := s.AcquireLock(ctx, k, "A", time.Minute)
	must(t, err, "A acquires")
	cells, err := s.client.Get(ctx, s.lockTable, row)
	must(t, err, "Get")
	must(t, s.ReleaseLock(ctx, k, "A"), "A releases")
	if !javaAcquire(t, ctx, row, cells[0].Timestamp, time.Minute) {
		t.Fatal("B's if-absent acquire after A's release was refused")
	}
	if _, err := s.InspectLock(ctx, k); err != nil {
		t.Fatalf("B's lock, put at the version A's cells had, is invisible: %v", err)
	}
}

// gate wraps the store's client and runs before() ahead of every write (Increment,
// CheckAndMutate): a pause between an operation's read and its write.
type gate struct {
	ops
	mu     sync.Mutex
	before func()
}

func (g *gate) hook() {
	g.mu.Lock()
	f := g.before
	g.before = nil
	g.mu.Unlock()
	if f != nil {
		f()
	}
}

func (g *gate) Increment(ctx context.Context, table string, inc *hbaserpc.Increment) ([]hbaserpc.Cell, error) {
	g.hook()
	return g.ops.Increment(ctx, table, inc)
}

func (g *gate) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	g.hook()
	return g.ops.CheckAndMutate(ctx, table, row, cond, muts...)
}

func (g *gate) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error) {
	g.hook()
	return g.ops.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
}

// TestAddLatchAfterExpiryWritesNothing: a latch that ends between AddLatch's read and
// its write is not re-created holding only the delta: AddLatch reports NotFound and
// the latch stays gone.
func TestAddLatchAfterExpiryWritesNothing(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	g := &gate{ops: s.db}
	s.db = g
	ctx := ctxT(t, time.Minute)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := key(level, "dc1")
		must(t, s.CreateLatch(ctx, k, 3, time.Second), "create a 1s latch")
		g.mu.Lock()
		g.before = func() { time.Sleep(1500 * time.Millisecond) }
		g.mu.Unlock()
		n, err := s.AddLatch(ctx, k, -1)
		wantCode(t, err, dcsync.NotFound, fmt.Sprintf("%v AddLatch whose write comes after the latch ended (returned %d)", level, n))
		got, err := s.ReadLatches(ctx, []dcsync.Key{k})
		must(t, err, "ReadLatches")
		if got[0].Found {
			t.Fatalf("%v: the ended latch was re-created: %+v", level, got[0])
		}
	}
}

// TestLatchNeverGoesBackUp: count updates never make an older count reappear, and the
// latch ends with its creation TTL (updates neither shorten nor extend it). The two
// updates must land while the latch lives: when a loaded machine made one return later
// than 2/3 of the TTL after the create began, the run is not judged and is made again
// with a fresh latch and the TTL and pauses doubled (up to 8 times).
func TestLatchNeverGoesBackUp(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 5*time.Minute)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		judged := false
		for f := time.Duration(1); f <= 8 && !judged; f *= 2 {
			judged = latchNeverGoesBackUp(t, ctx, s, level, f)
		}
		if !judged {
			t.Fatalf("%v: the machine was too slow for two updates within the TTL at every scale up to 8", level)
		}
	}
}

// latchNeverGoesBackUp runs TestLatchNeverGoesBackUp's scenario at time scale f (a 3s
// TTL times f); it reports false, having judged nothing, when an update came too late.
func latchNeverGoesBackUp(t *testing.T, ctx context.Context, s *Store, level dcsync.Level, f time.Duration) bool {
	t.Helper()
	ttl := 3 * time.Second * f
	k := key(level, "dc1")
	start := time.Now()
	must(t, s.CreateLatch(ctx, k, 3, ttl), "create")
	// The server stamped the create between start and created: the latch ends
	// between start+TTL and created+TTL, however slow a loaded machine made the
	// calls. Reads are judged by when they began and returned, not by a fixed
	// schedule.
	created := time.Now()
	for i := 0; i < 2; i++ {
		time.Sleep(300 * time.Millisecond * f)
		u := k
		if level == dcsync.XDC && i == 1 {
			u.Farm = "dc2" // a new farm cell of the XDC latch
		}
		_, err := s.AddLatch(ctx, u, -1)
		if el := time.Since(start); el > ttl*2/3 {
			t.Logf("%v scale %d: update %d returned at +%v, past 2/3 of the %v TTL (error %v); again at a larger scale", level, f, i+1, el, ttl, err)
			return false
		}
		must(t, err, "count down")
	}
	last := int64(1)
	ended := false
	for {
		began := time.Now()
		got, err := s.ReadLatches(ctx, []dcsync.Key{k})
		must(t, err, "ReadLatches")
		if !got[0].Found {
			if returned := time.Since(start); returned < ttl-100*time.Millisecond {
				t.Fatalf("%v: latch ended after %v, before its %v", level, returned, ttl)
			}
			ended = true
			if began.After(created.Add(ttl + 500*time.Millisecond)) {
				return true
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if ended {
			t.Fatalf("%v: the latch came back after it ended: %+v at %v", level, got[0], time.Since(start))
		}
		if began.After(created.Add(ttl + 500*time.Millisecond)) {
			t.Fatalf("%v: latch still there %v after a %v create returned (count %d)", level, began.Sub(created), ttl, got[0].Count)
		}
		if got[0].Count > last {
			t.Fatalf("%v: count went back up from %d to %d at %v", level, last, got[0].Count, time.Since(start))
		}
		last = got[0].Count
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTablesCreatedOnFirstUse: opening a store creates no table; the first latch call
// creates the latch table only, the first lock call the lock table.
func TestTablesCreatedOnFirstUse(t *testing.T) {
	c := shared(t)
	ctx := ctxT(t, 3*time.Minute)
	run := randHex(4)
	cfg := Config{LockTable: "dcsync_test_lazy_" + run, LatchTableSuffix: "dcsync_test_lazy_" + run}
	latchTable := layout.HBaseLatchTable(cfg.LatchTableSuffix)
	noteTables(cfg.LockTable, latchTable)
	exists := func(name string) bool {
		ok, err := c.TableExists(ctx, name)
		must(t, err, "TableExists")
		return ok
	}
	s, err := New(ctx, c, cfg)
	must(t, err, "New")
	defer s.Close()
	if exists(cfg.LockTable) || exists(latchTable) {
		t.Fatal("New created a table")
	}
	k := dcsync.Key{Level: dcsync.DC, Client: "c", Farm: "dc1", Name: "n"}
	_, err = s.ReadLatches(ctx, []dcsync.Key{k})
	must(t, err, "ReadLatches")
	if !exists(latchTable) || exists(cfg.LockTable) {
		t.Fatalf("after a latch read: latch table %v, lock table %v; want true, false", exists(latchTable), exists(cfg.LockTable))
	}
	_, err = s.InspectLock(ctx, k)
	wantCode(t, err, dcsync.NotFound, "Inspect")
	if !exists(cfg.LockTable) {
		t.Fatal("no lock table after a lock call")
	}
}

// TestLatchRowCollision: client "a_b" latch "c" and client "a" latch "b_c" share one
// Java row. The second create, in any farm, and updates through the other identity are
// refused with InvalidArgument, and nothing is written.
func TestLatchRowCollision(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	sfx := randHex(3)
	first := dcsync.Key{Level: dcsync.DC, Client: "a_" + sfx, Farm: "dc1", Name: "c"}
	other := dcsync.Key{Level: dcsync.DC, Client: "a", Farm: "dc1", Name: sfx + "_c"}
	if string(layout.HBaseLatchRow(first.Client, first.Name)) != string(layout.HBaseLatchRow(other.Client, other.Name)) {
		t.Fatal("test premise: the rows differ")
	}
	must(t, s.CreateLatch(ctx, first, 5, time.Minute), "create a_<x>/c")
	wantCode(t, s.CreateLatch(ctx, other, 7, time.Minute), dcsync.InvalidArgument, "create a/<x>_c in the same farm")
	o2 := other
	o2.Farm = "dc2"
	wantCode(t, s.CreateLatch(ctx, o2, 7, time.Minute), dcsync.InvalidArgument, "create a/<x>_c in another farm")
	_, err := s.EnsureLatch(ctx, o2, time.Minute)
	wantCode(t, err, dcsync.InvalidArgument, "get-or-create a/<x>_c in another farm")
	_, err = s.AddLatch(ctx, other, -1)
	wantCode(t, err, dcsync.InvalidArgument, "count down through the other identity")
	ox := other
	ox.Level = dcsync.XDC
	_, err = s.AddLatch(ctx, ox, -1)
	wantCode(t, err, dcsync.InvalidArgument, "XDC count down through the other identity")
	got, err := s.ReadLatches(ctx, []dcsync.Key{first})
	must(t, err, "ReadLatches")
	if got[0] != (driver.LatchCount{Found: true, Count: 5}) {
		t.Fatalf("the first latch after refused writes: %+v, want 5", got[0])
	}
	cells, err := s.client.Get(ctx, s.latchTable, layout.HBaseLatchRow(first.Client, first.Name))
	must(t, err, "Get")
	for _, c := range cells {
		if string(c.Qualifier) == "count_dc2" {
			t.Fatalf("a refused write left %s", c.Qualifier)
		}
	}
	n, err := s.AddLatch(ctx, first, -1)
	if err != nil || n != 4 {
		t.Fatalf("count down through the creator's identity = %d, %v; want 4", n, err)
	}
}

// TestFenceRowPerIdentity: lock keys that share a Java row ("a#b"+"c" and "a"+"b#c")
// have fencing counters of their own, in rows no Java key can name.
func TestFenceRowPerIdentity(t *testing.T) {
	k1 := dcsync.Key{Level: dcsync.XDC, Client: "a#b", Name: "c"}
	k2 := dcsync.Key{Level: dcsync.XDC, Client: "a", Name: "b#c"}
	if string(layout.HBaseLockRow(k1)) != string(layout.HBaseLockRow(k2)) {
		t.Fatal("test premise: the lock rows differ")
	}
	if string(fenceRow(k1)) == string(fenceRow(k2)) {
		t.Fatalf("colliding lock keys share the fence row %q", fenceRow(k1))
	}
	for _, k := range []dcsync.Key{k1, k2} {
		logical, ok := layout.Unsalt(fenceRow(k))
		if !ok || logical[:2] != FencePrefix {
			t.Fatalf("fence row %q", fenceRow(k))
		}
	}
}
