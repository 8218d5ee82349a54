package aerospike_test

import (
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// readAll reads keys and fails the test on an error.
func readAll(t *testing.T, s *aerospike.Store, keys ...dcsync.Key) []driver.LatchCount {
	t.Helper()
	got, err := s.ReadLatches(ctxT(t), keys)
	must(t, err, "ReadLatches")
	return got
}

// generation returns the record's generation, 0 when there is none.
func generation(t *testing.T, c *as.Client, k *as.Key) uint32 {
	t.Helper()
	rec, err := c.GetHeader(nil, k)
	if rc(err) == types.KEY_NOT_FOUND_ERROR {
		return 0
	}
	must(t, err, "raw get header")
	return rec.Generation
}

// TestDeleteLatchDC: a DC delete removes the caller's cell only, leaves the other farm's
// DC latch (count and end) and the record's TTL alone, reports NotFound once the cell is
// gone, and the cell can be created again right away. Deleting the last cell ends the
// latch at both levels.
func TestDeleteLatchDC(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	name := unique("del-dc")
	dc1, dc2 := latchKey(dcsync.DC, "dc1", name), latchKey(dcsync.DC, "dc2", name)
	xdc := latchKey(dcsync.XDC, "dc1", name)
	rk := latchRecord(t, name)
	must(t, s.CreateLatch(ctx, dc1, 3, time.Hour), "create dc1")
	must(t, s.CreateLatch(ctx, dc2, 2, time.Minute), "create dc2")
	before, aerr := c.GetHeader(nil, rk)
	must(t, aerr, "raw header")

	must(t, s.DeleteLatch(ctx, dc1), "DC delete dc1")
	if got, want := readAll(t, s, dc1, dc2, xdc), []driver.LatchCount{{}, {Found: true, Count: 2}, {Found: true, Count: 2}}; !equal(got, want) {
		t.Fatalf("after DC delete of dc1: ReadLatches(dc1, dc2, xdc) = %v, want %v", got, want)
	}
	after, aerr := c.Get(nil, rk)
	must(t, aerr, "raw get")
	if _, ok := after.Bins["count#dc1"]; ok {
		t.Fatalf("count#dc1 still in the record: %v", after.Bins)
	}
	if e, _ := after.Bins[aerospike.EndsBin].(map[any]any); len(e) != 1 || e["dc2"] == nil {
		t.Fatalf("%s = %#v, want dc2's entry only", aerospike.EndsBin, after.Bins[aerospike.EndsBin])
	}
	if after.Expiration > before.Expiration {
		t.Fatalf("DC delete moved the record's TTL: %d -> %d", before.Expiration, after.Expiration)
	}
	cells, err := s.ListLatches(ctx, client)
	must(t, err, "ListLatches")
	for _, cell := range cells {
		if cell.Key == dc1 {
			t.Fatalf("ListLatches still lists %s: %+v", dc1, cells)
		}
	}

	wantCode(t, s.DeleteLatch(ctx, dc1), dcsync.NotFound, "second DC delete of dc1")
	must(t, s.CreateLatch(ctx, dc1, 5, time.Hour), "re-create dc1 right after its delete")
	if got, want := readAll(t, s, dc1, dc2, xdc), []driver.LatchCount{{Found: true, Count: 5}, {Found: true, Count: 2}, {Found: true, Count: 7}}; !equal(got, want) {
		t.Fatalf("after re-create: ReadLatches(dc1, dc2, xdc) = %v, want %v", got, want)
	}

	// The last cells: the latch ends at both levels, and a create starts a fresh one.
	must(t, s.DeleteLatch(ctx, dc2), "DC delete dc2")
	must(t, s.DeleteLatch(ctx, dc1), "DC delete of the last cell")
	if got, want := readAll(t, s, dc1, dc2, xdc), []driver.LatchCount{{}, {}, {}}; !equal(got, want) {
		t.Fatalf("after deleting every cell: ReadLatches(dc1, dc2, xdc) = %v, want %v", got, want)
	}
	wantCode(t, s.DeleteLatch(ctx, xdc), dcsync.NotFound, "XDC delete of a latch whose cells were deleted")
	if _, err := s.AddLatch(ctx, xdc, 1); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("XDC AddLatch after every cell was deleted: %v, want NotFound", err)
	}
	must(t, s.CreateLatch(ctx, xdc, 4, time.Minute), "XDC create after every cell was deleted")
	if got, want := readAll(t, s, dc1, dc2, xdc), []driver.LatchCount{{Found: true, Count: 4}, {}, {Found: true, Count: 4}}; !equal(got, want) {
		t.Fatalf("after XDC re-create: ReadLatches(dc1, dc2, xdc) = %v, want %v", got, want)
	}
}

// TestDeleteLatchXDC: an XDC delete removes the whole latch, every farm's cell, and the
// record; it can be created again right away.
func TestDeleteLatchXDC(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	name := unique("del-xdc")
	dc1, dc2 := latchKey(dcsync.DC, "dc1", name), latchKey(dcsync.DC, "dc2", name)
	xdc := latchKey(dcsync.XDC, "dc2", name)
	rk := latchRecord(t, name)
	must(t, s.CreateLatch(ctx, dc1, 3, time.Hour), "create dc1")
	must(t, s.CreateLatch(ctx, dc2, 2, time.Hour), "create dc2")

	must(t, s.DeleteLatch(ctx, xdc), "XDC delete")
	if _, err := c.Get(nil, rk); rc(err) != types.KEY_NOT_FOUND_ERROR {
		t.Fatalf("raw get after XDC delete: %v, want KEY_NOT_FOUND", err)
	}
	if got, want := readAll(t, s, dc1, dc2, xdc), []driver.LatchCount{{}, {}, {}}; !equal(got, want) {
		t.Fatalf("after XDC delete: ReadLatches(dc1, dc2, xdc) = %v, want %v", got, want)
	}
	wantCode(t, s.DeleteLatch(ctx, xdc), dcsync.NotFound, "second XDC delete")
	wantCode(t, s.DeleteLatch(ctx, dc1), dcsync.NotFound, "DC delete after XDC delete")
	must(t, s.CreateLatch(ctx, xdc, 6, time.Minute), "re-create right after the XDC delete")
	if got, want := readAll(t, s, dc1, dc2, xdc), []driver.LatchCount{{}, {Found: true, Count: 6}, {Found: true, Count: 6}}; !equal(got, want) {
		t.Fatalf("after re-create: ReadLatches(dc1, dc2, xdc) = %v, want %v", got, want)
	}
}

// TestDeleteLatchNotFound: a latch that never existed, a farm without a cell, and a
// latch that has ended are NotFound at both levels, and nothing is written.
func TestDeleteLatchNotFound(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	missing := unique("del-missing")
	wantCode(t, s.DeleteLatch(ctx, latchKey(dcsync.DC, "dc1", missing)), dcsync.NotFound, "DC delete of a missing latch")
	wantCode(t, s.DeleteLatch(ctx, latchKey(dcsync.XDC, "dc1", missing)), dcsync.NotFound, "XDC delete of a missing latch")

	name := unique("del-ended")
	rk := latchRecord(t, name)
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", name), 3, time.Hour), "create dc1")
	gen := generation(t, c, rk)
	wantCode(t, s.DeleteLatch(ctx, latchKey(dcsync.DC, "dc2", name)), dcsync.NotFound, "DC delete of a farm without a cell")
	if g := generation(t, c, rk); g != gen {
		t.Fatalf("refused delete changed the record: generation %d -> %d", gen, g)
	}

	short := unique("del-short")
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", short), 3, time.Second), "create a 1 s latch")
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc2", short), 3, time.Hour), "create a 1 h latch in dc2")
	time.Sleep(1500 * time.Millisecond)
	wantCode(t, s.DeleteLatch(ctx, latchKey(dcsync.DC, "dc1", short)), dcsync.NotFound, "DC delete of an ended cell")
	must(t, s.DeleteLatch(ctx, latchKey(dcsync.DC, "dc2", short)), "DC delete of the live cell beside an ended one")
	wantCode(t, s.DeleteLatch(ctx, latchKey(dcsync.XDC, "dc1", short)), dcsync.NotFound, "XDC delete of an ended latch")

	xshort := unique("del-xshort")
	must(t, s.CreateLatch(ctx, latchKey(dcsync.XDC, "dc1", xshort), 3, time.Second), "create a 1 s XDC latch")
	time.Sleep(1500 * time.Millisecond)
	wantCode(t, s.DeleteLatch(ctx, latchKey(dcsync.XDC, "dc2", xshort)), dcsync.NotFound, "XDC delete of an ended XDC latch")
	wantCode(t, s.DeleteLatch(ctx, latchKey(dcsync.DC, "dc1", xshort)), dcsync.NotFound, "DC delete of an ended XDC latch")
}

// TestDeleteLatchCollision: a delete of a latch whose Java key is another latch's record
// is refused, InvalidArgument naming both, and writes nothing.
func TestDeleteLatchCollision(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	u := unique("c")
	k1 := dcsync.Key{Level: dcsync.DC, Client: "a#b", Farm: "dc1", Name: u}
	k2 := dcsync.Key{Level: dcsync.DC, Client: "a", Farm: "dc1", Name: "b#" + u}
	rk := key(t, latchSet, "D_LTCH#a#b#"+u)
	must(t, s.CreateLatch(ctx, k1, 5, time.Minute), "create a#b/"+u)
	gen := generation(t, c, rk)
	for _, k := range []dcsync.Key{k2, {Level: dcsync.XDC, Client: k2.Client, Farm: "dc1", Name: k2.Name}} {
		err := s.DeleteLatch(ctx, k)
		wantCode(t, err, dcsync.InvalidArgument, "delete of the colliding latch "+k.String())
		if msg := err.Error(); !strings.Contains(msg, `"a#b"`) || !strings.Contains(msg, `"b#`+u+`"`) {
			t.Fatalf("error %q does not name both identities", msg)
		}
	}
	if g := generation(t, c, rk); g != gen {
		t.Fatalf("refused deletes changed the record: generation %d -> %d", gen, g)
	}
	if got, want := readAll(t, s, k1), []driver.LatchCount{{Found: true, Count: 5}}; !equal(got, want) {
		t.Fatalf("owner's latch after refused deletes = %v, want %v", got, want)
	}
}

// TestDeleteLatchJava: a latch the Java library wrote (count bins only, no identity, no
// ends) can be deleted: DC removes the farm's bin, the last bin takes the record with it,
// and XDC deletes the record.
func TestDeleteLatchJava(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	name := unique("del-java")
	rk := latchRecord(t, name)
	dc1, dc2 := latchKey(dcsync.DC, "dc1", name), latchKey(dcsync.DC, "dc2", name)
	xdc := latchKey(dcsync.XDC, "dc1", name)
	must(t, javaCreateLatch(c, rk, "dc1", 3), "Java create dc1")
	must(t, c.Put(nil, rk, as.BinMap{"count#dc2": 4}), "Java cell dc2")

	must(t, s.DeleteLatch(ctx, dc1), "DC delete of a Java cell")
	if got, want := readAll(t, s, dc1, dc2, xdc), []driver.LatchCount{{}, {Found: true, Count: 4}, {Found: true, Count: 4}}; !equal(got, want) {
		t.Fatalf("after DC delete: ReadLatches(dc1, dc2, xdc) = %v, want %v", got, want)
	}
	must(t, s.DeleteLatch(ctx, dc2), "DC delete of the last Java cell")
	if _, err := c.Get(nil, rk); rc(err) != types.KEY_NOT_FOUND_ERROR {
		t.Fatalf("raw get after deleting the last Java cell: %v, want KEY_NOT_FOUND", err)
	}
	wantCode(t, s.DeleteLatch(ctx, xdc), dcsync.NotFound, "XDC delete of the deleted Java latch")

	must(t, javaCreateLatch(c, rk, "dc1", 3), "Java create dc1 again")
	must(t, c.Put(nil, rk, as.BinMap{"count#dc2": 4}), "Java cell dc2 again")
	must(t, s.DeleteLatch(ctx, xdc), "XDC delete of a Java latch")
	if _, err := c.Get(nil, rk); rc(err) != types.KEY_NOT_FOUND_ERROR {
		t.Fatalf("raw get after XDC delete of a Java latch: %v, want KEY_NOT_FOUND", err)
	}
}

// TestDeleteLatchInDoubt: a delete whose reply is lost (the server applied it, the
// client timed out) is retried; the retry finds the latch gone and must report success,
// not NotFound.
func TestDeleteLatchInDoubt(t *testing.T) {
	p, _, s := inDoubtStore(t)
	ctx := ctxT(t)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		name := unique("del-doubt-" + level.String())
		k := latchKey(level, "dc1", name)
		must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", name), 3, time.Minute), "create dc1")
		must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc2", name), 2, time.Minute), "create dc2")
		before := p.Stats().Dropped
		p.DropResponses(1, func(c command) bool { return (c.Kind == "write" || c.Kind == "delete") && c.Set == latchSet })
		must(t, s.DeleteLatch(ctx, k), level.String()+" delete with a lost reply")
		if d := p.Stats().Dropped - before; d != 1 {
			t.Fatalf("proxy dropped %d replies, want 1", d)
		}
		want := []driver.LatchCount{{}, {Found: true, Count: 2}}
		if level == dcsync.XDC {
			want = []driver.LatchCount{{}, {}}
		}
		if got := readAll(t, s, latchKey(dcsync.DC, "dc1", name), latchKey(dcsync.DC, "dc2", name)); !equal(got, want) {
			t.Fatalf("after %s delete with a lost reply: ReadLatches(dc1, dc2) = %v, want %v", level, got, want)
		}
	}
}
