package hbase

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

func delKey(l dcsync.Level, client, farm, name string) dcsync.Key {
	return dcsync.Key{Level: l, Client: client, Farm: farm, Name: name}
}

// readOne reads one latch key: found and count.
func readOne(t *testing.T, s *Store, k dcsync.Key) driver.LatchCount {
	t.Helper()
	res, err := s.ReadLatches(ctxT(t, time.Minute), []dcsync.Key{k})
	must(t, err, "ReadLatches "+k.String())
	return res[0]
}

// TestDeleteLatchDC: a DC delete removes this farm's latch and leaves the other farm's
// DC latch of the same name (the same HBase row) as it was; a second delete is
// NotFound; an update after the delete is NotFound; a re-create right after the delete
// (possibly in the same millisecond) is visible.
func TestDeleteLatchDC(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	client := "del" + randHex(6)
	k1, k2 := delKey(dcsync.DC, client, "dc1", "l"), delKey(dcsync.DC, client, "dc2", "l")
	must(t, s.CreateLatch(ctx, k1, 3, time.Hour), "create dc1")
	must(t, s.CreateLatch(ctx, k2, 2, time.Hour), "create dc2")
	must(t, s.DeleteLatch(ctx, k1), "delete dc1")
	if got := readOne(t, s, k1); got.Found {
		t.Fatalf("dc1 after delete: %+v", got)
	}
	if got := readOne(t, s, k2); !got.Found || got.Count != 2 {
		t.Fatalf("dc2 after dc1's delete: %+v, want count 2", got)
	}
	if err := s.DeleteLatch(ctx, k1); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("second delete = %v, want NotFound", err)
	}
	if _, err := s.AddLatch(ctx, k1, -1); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("AddLatch after delete = %v, want NotFound", err)
	}
	// dc2's latch still updates (its marker was left).
	n, err := s.AddLatch(ctx, k2, -1)
	if err != nil || n != 1 {
		t.Fatalf("AddLatch dc2 = %d, %v; want 1", n, err)
	}
	// Delete and re-create at once, many times: a delete stamped at server time would
	// hide a re-create of the same millisecond.
	for i := 0; i < 20; i++ {
		must(t, s.CreateLatch(ctx, k1, int64(i+1), time.Hour), "re-create dc1")
		if got := readOne(t, s, k1); !got.Found || got.Count != int64(i+1) {
			t.Fatalf("round %d: dc1 after re-create: %+v", i, got)
		}
		must(t, s.DeleteLatch(ctx, k1), "delete dc1 again")
	}
	must(t, s.CreateLatch(ctx, k1, 7, time.Hour), "final re-create")
	if n, err := s.AddLatch(ctx, k1, -2); err != nil || n != 5 {
		t.Fatalf("AddLatch after re-create = %d, %v; want 5", n, err)
	}
	// Deleting the last farm's cell empties the row.
	must(t, s.DeleteLatch(ctx, k1), "delete dc1")
	must(t, s.DeleteLatch(ctx, k2), "delete dc2")
	cells, err := s.db.Get(ctx, s.latchTable, layout.HBaseLatchRow(client, "l"), hbaserpc.Column{Family: famLatch})
	must(t, err, "raw get")
	if len(cells) != 0 {
		t.Fatalf("row after every farm's delete holds %d cells: %+v", len(cells), cells)
	}
}

// TestDeleteLatchXDC: an XDC delete removes every farm's cell, the markers and
// C:dcsync_xdc, so an XDC re-create right after succeeds.
func TestDeleteLatchXDC(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	client := "del" + randHex(6)
	x1, x2 := delKey(dcsync.XDC, client, "dc1", "x"), delKey(dcsync.XDC, client, "dc2", "x")
	must(t, s.CreateLatch(ctx, x1, 3, time.Hour), "create XDC")
	if n, err := s.AddLatch(ctx, x2, 2); err != nil || n != 5 {
		t.Fatalf("AddLatch dc2 = %d, %v; want 5", n, err)
	}
	must(t, s.DeleteLatch(ctx, x2), "delete XDC from dc2")
	for _, k := range []dcsync.Key{x1, delKey(dcsync.DC, client, "dc1", "x"), delKey(dcsync.DC, client, "dc2", "x")} {
		if got := readOne(t, s, k); got.Found {
			t.Fatalf("%s after XDC delete: %+v", k, got)
		}
	}
	cells, err := s.db.Get(ctx, s.latchTable, layout.HBaseLatchRow(client, "x"), hbaserpc.Column{Family: famLatch})
	must(t, err, "raw get")
	if len(cells) != 0 {
		t.Fatalf("row after XDC delete holds %d cells: %+v", len(cells), cells)
	}
	if err := s.DeleteLatch(ctx, x1); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("second XDC delete = %v, want NotFound", err)
	}
	for i := 0; i < 10; i++ {
		must(t, s.CreateLatch(ctx, x1, 4, time.Hour), "XDC re-create")
		if got := readOne(t, s, x2); !got.Found || got.Count != 4 {
			t.Fatalf("round %d: XDC after re-create: %+v", i, got)
		}
		must(t, s.DeleteLatch(ctx, x1), "XDC delete again")
	}
}

// TestDeleteLatchNotFound: a latch never created, or ended (by its marker), is
// NotFound and nothing is deleted; a bad key is InvalidArgument.
func TestDeleteLatchNotFound(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	client := "del" + randHex(6)
	for _, l := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		if err := s.DeleteLatch(ctx, delKey(l, client, "dc1", "never")); !errors.Is(err, dcsync.ErrNotFound) {
			t.Fatalf("%v delete of a missing latch = %v, want NotFound", l, err)
		}
	}
	wantCode(t, s.DeleteLatch(ctx, delKey(dcsync.DC, client, "dc1", "")), dcsync.InvalidArgument, "no name")
	wantCode(t, s.DeleteLatch(ctx, delKey(dcsync.DC, client, "", "n")), dcsync.InvalidArgument, "no farm")

	// dc2 has a latch; dc1 has none: a DC delete in dc1 is NotFound and leaves dc2's.
	k2 := delKey(dcsync.DC, client, "dc2", "other")
	must(t, s.CreateLatch(ctx, k2, 1, time.Hour), "create dc2")
	if err := s.DeleteLatch(ctx, delKey(dcsync.DC, client, "dc1", "other")); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("DC delete of another farm's latch = %v, want NotFound", err)
	}
	if got := readOne(t, s, k2); !got.Found || got.Count != 1 {
		t.Fatalf("dc2 after dc1's NotFound: %+v", got)
	}

	ended := delKey(dcsync.XDC, client, "dc1", "short")
	must(t, s.CreateLatch(ctx, ended, 1, time.Second), "create short")
	time.Sleep(1500 * time.Millisecond)
	if err := s.DeleteLatch(ctx, ended); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("delete of an ended latch = %v, want NotFound", err)
	}
	endedDC := delKey(dcsync.DC, client, "dc1", "short")
	if err := s.DeleteLatch(ctx, endedDC); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("DC delete of an ended latch = %v, want NotFound", err)
	}
}

// TestDeleteLatchCollision: a delete of (client, name) whose Java row holds a latch
// dcsync wrote for another (client, name) is refused, and that latch stays.
func TestDeleteLatchCollision(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	base := "del" + randHex(6)
	mine := delKey(dcsync.DC, base+"_a", "dc1", "b") // row <base>_a_b
	other := delKey(dcsync.DC, base, "dc1", "a_b")   // the same row
	must(t, s.CreateLatch(ctx, mine, 2, time.Hour), "create")
	for _, l := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		other.Level = l
		wantCode(t, s.DeleteLatch(ctx, other), dcsync.InvalidArgument, "delete of the colliding latch")
	}
	if got := readOne(t, s, mine); !got.Found || got.Count != 2 {
		t.Fatalf("latch after refused delete: %+v", got)
	}
	must(t, s.DeleteLatch(ctx, mine), "delete own")
}

// TestDeleteLatchJavaRow: a latch a Java client wrote (a count cell without marker or
// TTL) is deleted too.
func TestDeleteLatchJavaRow(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	client := "del" + randHex(6)
	row := layout.HBaseLatchRow(client, "j")
	must(t, shared(t).Put(ctx, s.latchTable, &hbaserpc.Put{Row: row, Values: []hbaserpc.Value{
		{Family: famLatch, Qualifier: layout.HBaseLatchQualifier("dc1"), Value: be64(3)},
		{Family: famLatch, Qualifier: layout.HBaseLatchQualifier("dc2"), Value: be64(4)},
	}}), "java put")
	must(t, s.DeleteLatch(ctx, delKey(dcsync.DC, client, "dc1", "j")), "DC delete")
	if got := readOne(t, s, delKey(dcsync.XDC, client, "dc1", "j")); !got.Found || got.Count != 4 {
		t.Fatalf("XDC sum after dc1's delete: %+v, want 4", got)
	}
	must(t, s.DeleteLatch(ctx, delKey(dcsync.XDC, client, "dc1", "j")), "XDC delete")
	if got := readOne(t, s, delKey(dcsync.XDC, client, "dc1", "j")); got.Found {
		t.Fatalf("after XDC delete: %+v", got)
	}
}

// TestDeleteLatchViaURL is the path `dcsync latch delete` takes: a store opened from an
// hbase:// URL (as storeurl does), used through the driver.LatchDeleter interface.
func TestDeleteLatchViaURL(t *testing.T) {
	shared(t)
	ctx := ctxT(t, 2*time.Minute)
	u, err := url.Parse("hbase://" + zkQuorum(t) + "?lock_table=" + url.QueryEscape(fixture.lockTable) + "&latch_table_suffix=" + url.QueryEscape(fixture.latchSuffix))
	must(t, err, "parse URL")
	hs, err := OpenURL(ctx, u)
	must(t, err, "OpenURL")
	defer hs.Close()
	var st driver.Store = hs
	d, ok := st.(driver.LatchDeleter)
	if !ok {
		t.Fatal("the HBase store does not implement dcsync.LatchDeleter")
	}
	k := delKey(dcsync.DC, "del"+randHex(6), "dc1", "cli")
	must(t, st.CreateLatch(ctx, k, 1, time.Minute), "create")
	must(t, d.DeleteLatch(ctx, k), "delete")
	if err := d.DeleteLatch(ctx, k); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("second delete = %v, want NotFound", err)
	}
}

// racing wraps the store's client and runs hook once, just before the first
// CheckAndMutate (between DeleteLatch's read and its delete).
type racing struct {
	ops
	once sync.Once
	hook func()
}

func (r *racing) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	r.once.Do(r.hook)
	return r.ops.CheckAndMutate(ctx, table, row, cond, muts...)
}

// TestDeleteLatchRacingUpdate: an update that lands between DeleteLatch's read and its
// delete makes the delete's condition fail; DeleteLatch reads again and deletes the
// latch with the update's effect (no cell survives holding the updated count).
func TestDeleteLatchRacingUpdate(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	other := openStore(t)
	defer other.Close()
	ctx := ctxT(t, time.Minute)
	client := "del" + randHex(6)
	for _, l := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := delKey(l, client, "dc1", "race"+l.String())
		must(t, s.CreateLatch(ctx, k, 5, time.Hour), "create")
		hooked := false
		s.db = &racing{ops: other.db, hook: func() {
			hooked = true
			if _, err := other.AddLatch(ctx, k, -1); err != nil {
				t.Errorf("racing AddLatch: %v", err)
			}
		}}
		must(t, s.DeleteLatch(ctx, k), "delete with a racing update")
		if !hooked {
			t.Fatal("the racing update did not run")
		}
		if got := readOne(t, other, k); got.Found {
			t.Fatalf("%v: latch after delete with a racing update: %+v", l, got)
		}
		s.db = other.db
	}
}

// TestDeleteLatchInDoubt: a delete whose reply is lost (applied or not) is judged by
// reading the row again: applied is success, not applied is sent again.
func TestDeleteLatchInDoubt(t *testing.T) {
	s, f := faultyStore(t)
	ctx := ctxT(t, time.Minute)
	client := "del" + randHex(6)
	for i, plan := range []fault{lostAck, notSent} {
		k := delKey(dcsync.DC, client, "dc1", "doubt"+strconv.Itoa(i))
		must(t, s.CreateLatch(ctx, k, 1, time.Hour), "create")
		f.set(plan)
		must(t, s.DeleteLatch(ctx, k), "delete in doubt")
		if got := readOne(t, s, k); got.Found {
			t.Fatalf("plan %v: latch after delete: %+v", plan, got)
		}
		must(t, s.CreateLatch(ctx, k, 2, time.Hour), "re-create after an in-doubt delete")
		if got := readOne(t, s, k); !got.Found || got.Count != 2 {
			t.Fatalf("plan %v: re-created latch: %+v", plan, got)
		}
	}
}
