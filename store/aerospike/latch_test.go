package aerospike_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestOpIDsSurviveClockSkew: update ids once started with the writer's wall clock and
// the record kept the highest 64: a writer whose clock ran 2 s ahead pushed out another
// writer's newer, in-doubt id, whose retry was then applied again (1 count-down became
// 2). Ids now carry no clock: each writer's entry holds its last sequence number, and
// entries are ranked by the server's time. Writer A updates, B's update is in doubt, A
// updates again; B's retry must be recognised.
func TestOpIDsSurviveClockSkew(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{OpIDsKept: 4})
	ctx := ctxT(t)
	k := latchKey(dcsync.DC, "dc1", unique("skew"))
	must(t, s.CreateLatch(ctx, k, 100, time.Minute), "create")
	a := aerospike.NewOpID()
	for i := 0; i < 4; i++ {
		_, err := aerospike.AddLatchWithOpID(ctx, s, k, -1, a)
		must(t, err, "A counts down")
		a = aerospike.Next(a)
	}
	b := aerospike.NewOpID()
	n, err := aerospike.AddLatchWithOpID(ctx, s, k, -1, b)
	must(t, err, "B counts down (its reply is lost)")
	if n != 95 {
		t.Fatalf("B's count-down = %d, want 95", n)
	}
	_, err = aerospike.AddLatchWithOpID(ctx, s, k, -1, a)
	must(t, err, "A counts down again")
	n, err = aerospike.AddLatchWithOpID(ctx, s, k, -1, b)
	must(t, err, "B retries its count-down")
	if n != 94 {
		t.Fatalf("B's retry returned %d, want 94: its one count-down was applied twice", n)
	}
	if got := javaCount(t, c, latchRecord(t, k.Name), dcsync.DC, "dc1"); got != 94 {
		t.Fatalf("stored count = %d, want 94", got)
	}
}

// TestOpIDsAreTrimmed: the record remembers the OpIDsKept writers that updated it last.
func TestOpIDsAreTrimmed(t *testing.T) {
	c := realClient(t)
	ctx := ctxT(t)
	for _, kept := range []int{1, 4} {
		s := newStore(t, c, aerospike.Config{OpIDsKept: kept})
		name := unique(fmt.Sprint("trim", kept))
		k := latchKey(dcsync.XDC, "dc1", name)
		must(t, s.CreateLatch(ctx, k, 100, time.Minute), "create")
		for i := 0; i < 10; i++ {
			_, err := aerospike.AddLatchWithOpID(ctx, s, k, -1, aerospike.NewOpID())
			must(t, err, "AddLatch")
		}
		rec, err := c.Get(nil, latchRecord(t, name))
		must(t, err, "raw get")
		ops, _ := rec.Bins[aerospike.OpsBin].(map[any]any)
		if len(ops) != kept {
			t.Fatalf("OpIDsKept %d: the record remembers %d writers: %v", kept, len(ops), rec.Bins[aerospike.OpsBin])
		}
		if n := javaCount(t, c, rec.Key, dcsync.XDC, ""); n != 90 {
			t.Fatalf("count = %d, want 90", n)
		}
	}
}

// TestXDCAddIsOneWrite: an XDC count update is one atomic operate that writes the
// caller's cell and returns every count bin (it used to mix a read-all op with map ops,
// which the real server refuses with PARAMETER_ERROR).
func TestXDCAddIsOneWrite(t *testing.T) {
	p := startProxy(t)
	c := dial(t, p.Addr())
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	name := unique("xdc-one")
	must(t, s.CreateLatch(ctx, latchKey(dcsync.XDC, "dc1", name), 5, time.Minute), "create")
	for i, farm := range []string{"dc2", "dc2", "dc1", "dc3"} {
		before := p.Stats()
		n, err := s.AddLatch(ctx, latchKey(dcsync.XDC, farm, name), -1)
		must(t, err, "XDC AddLatch from "+farm)
		if want := int64(4 - i); n != want {
			t.Fatalf("XDC AddLatch from %s = %d, want %d", farm, n, want)
		}
		after := p.Stats()
		if w, r, b := after.Writes-before.Writes, after.Reads-before.Reads, after.Batches-before.Batches; w != 1 || r != 0 || b != 0 {
			t.Fatalf("XDC AddLatch sent %d writes, %d reads, %d batches; want one write", w, r, b)
		}
	}
	wantCode(t, func() error { _, err := s.AddLatch(ctx, latchKey(dcsync.XDC, "dc1", unique("none")), -1); return err }(),
		dcsync.NotFound, "XDC AddLatch of a missing latch")
}

// TestLatchRecordTTLOnlyExtends: latches of one name in different farms share a record;
// creating one extends the record's TTL when it needs longer and never shortens it, and
// count updates never touch it.
func TestLatchRecordTTLOnlyExtends(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	name := unique("ttl-extend")
	rk := latchRecord(t, name)
	ttl := func() uint32 {
		t.Helper()
		hdr, err := c.GetHeader(nil, rk)
		must(t, err, "get header")
		return hdr.Expiration
	}
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", name), 5, time.Minute), "create 1 min latch in dc1")
	if got := ttl(); got < 55 || got > 61 {
		t.Fatalf("record TTL = %d, want about 61", got)
	}
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc2", name), 5, time.Second), "create 1 s latch in dc2")
	if got := ttl(); got < 55 {
		t.Fatalf("a 1 s latch in dc2 shortened the record's TTL to %d", got)
	}
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc3", name), 5, time.Hour), "create 1 h latch in dc3")
	if got := ttl(); got < 3590 || got > 3601 {
		t.Fatalf("a 1 h latch in dc3 left the record's TTL at %d, want about 3601", got)
	}
	_, err := s.AddLatch(ctx, latchKey(dcsync.DC, "dc1", name), -1)
	must(t, err, "DC AddLatch")
	_, err = s.AddLatch(ctx, latchKey(dcsync.XDC, "dc4", name), -1)
	must(t, err, "XDC AddLatch")
	if got := ttl(); got < 3590 || got > 3601 {
		t.Fatalf("count updates moved the record's TTL to %d", got)
	}
}

// TestNamespaceWithoutNsup: a namespace without nsup-period refuses every write with a
// TTL (FAIL_FORBIDDEN). dcsync says so, naming the cause, instead of "internal".
func TestNamespaceWithoutNsup(t *testing.T) {
	c := realClient(t)
	const ns = "nonsup" // testenv/aerospike/aerospike.conf.in
	info, aerr := c.Cluster().GetNodes()[0].RequestInfo(as.NewInfoPolicy(), "namespaces")
	if aerr != nil {
		t.Fatalf("info namespaces: %v", aerr)
	}
	if !strings.Contains(";"+info["namespaces"]+";", ";"+ns+";") {
		t.Fatalf("the server has no namespace %q (namespaces %q): start it with testenv/aerospike/up", ns, info["namespaces"])
	}
	s := newStore(t, c, aerospike.Config{Namespace: ns})
	ctx := ctxT(t)
	k := latchKey(dcsync.DC, "dc1", unique("nonsup"))
	check := func(err error, what string) {
		t.Helper()
		wantCode(t, err, dcsync.TableCreation, what)
		want := `namespace "nonsup" refuses writes with a TTL: set nsup-period > 0 or allow-ttl-without-nsup`
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: error %q does not say %q", what, err, want)
		}
	}
	check(s.CreateLatch(ctx, k, 1, time.Minute), "CreateLatch")
	_, err := s.EnsureLatch(ctx, k, time.Minute)
	check(err, "EnsureLatch")
	_, err = s.AcquireLock(ctx, k, "owner", time.Minute)
	check(err, "AcquireLock")
}

// busyCounter counts the store's retry log lines that report KEY_BUSY, and other busy
// replies.
type busyCounter struct{ n, other *atomic.Int64 }

func (h busyCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h busyCounter) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			if strings.Contains(a.Value.String(), "KEY_BUSY") {
				h.n.Add(1)
			} else {
				h.other.Add(1)
			}
		}
		return true
	})
	return nil
}
func (h busyCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h busyCounter) WithGroup(string) slog.Handler      { return h }

// TestHotKeyCountsAreExact: many goroutines update one latch record. Beyond about 20
// pending writes on one record the real server answers KEY_BUSY (the write was not
// applied); dcsync retries it with backoff, and the final count is exact.
func TestHotKeyCountsAreExact(t *testing.T) {
	// A pool big enough for every worker: contention is then the server's.
	policy := as.NewClientPolicy()
	policy.ConnectionQueueSize = 512
	host, port := splitAddr(t, realServer(t))
	c, aerr := as.NewClientWithPolicy(policy, host, port)
	if aerr != nil {
		t.Fatal(aerr)
	}
	t.Cleanup(c.Close)
	var busy, other atomic.Int64
	s := newStore(t, c, aerospike.Config{Logger: slog.New(busyCounter{&busy, &other})})
	ctx := ctxT(t)
	const workers, each = 256, 8
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		name := unique("hot-" + level.String())
		must(t, s.CreateLatch(ctx, latchKey(level, "dc1", name), workers*each, time.Minute), "create")
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			farm := "dc1"
			if level == dcsync.XDC && w%2 == 1 {
				farm = "dc2"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					if _, err := s.AddLatch(ctx, latchKey(level, farm, name), -1); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%v worker: %v", level, err)
		}
		got, err := s.ReadLatches(ctx, []dcsync.Key{latchKey(level, "dc1", name)})
		must(t, err, "ReadLatches")
		if got[0] != (driver.LatchCount{Found: true, Count: 0}) {
			t.Fatalf("%v count after %d count-downs = %+v, want exactly 0", level, workers*each, got[0])
		}
	}
	t.Logf("KEY_BUSY replies retried: %d; other retries: %d", busy.Load(), other.Load())
}

// TestKeyBusyIsRetried: KEY_BUSY means the server refused the write (too many writes
// queued on the record); nothing was applied. dcsync retries it with backoff, without
// counting it against Attempts, and the update is applied exactly once. (The proxy
// answers KEY_BUSY itself: the real server does so only under load, see
// TestHotKeyCountsAreExact.)
func TestKeyBusyIsRetried(t *testing.T) {
	p := startProxy(t)
	c := dial(t, p.Addr())
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		name := unique("busy-" + level.String())
		k := latchKey(level, "dc1", name)
		must(t, s.CreateLatch(ctx, k, 10, time.Minute), "create")
		before := p.Stats().Busy
		p.BusyResponses(3*aerospike.DefaultAttempts, writesTo(latchSet))
		n, err := s.AddLatch(ctx, k, -1)
		must(t, err, fmt.Sprintf("AddLatch after %d KEY_BUSY replies", 3*aerospike.DefaultAttempts))
		if n != 9 {
			t.Fatalf("AddLatch = %d, want 9", n)
		}
		if got := p.Stats().Busy - before; got != 3*aerospike.DefaultAttempts {
			t.Fatalf("the proxy answered KEY_BUSY %d times, want %d", got, 3*aerospike.DefaultAttempts)
		}
		if got := javaCount(t, c, latchRecord(t, name), dcsync.DC, "dc1"); got != 9 {
			t.Fatalf("stored count = %d, want 9", got)
		}
	}
}

// TestLatchKeyCollision: client "a#b" with latch "c" and client "a" with latch "b#c"
// share one record in the Java layout. The first to create it owns it (its identity is
// in the record); the other's creates and updates are refused, nothing written, and its
// reads find no latch.
func TestLatchKeyCollision(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	u := unique("c")
	k1 := dcsync.Key{Level: dcsync.DC, Client: "a#b", Farm: "dc1", Name: u}
	k2 := dcsync.Key{Level: dcsync.DC, Client: "a", Farm: "dc1", Name: "b#" + u}
	rk := key(t, latchSet, "D_LTCH#a#b#"+u)
	must(t, s.CreateLatch(ctx, k1, 5, time.Minute), "create a#b/"+u)
	before, aerr := c.Get(nil, rk)
	if aerr != nil {
		t.Fatalf("raw get: %v", aerr)
	}

	at := func(k dcsync.Key, level dcsync.Level, farm string) dcsync.Key {
		k.Level, k.Farm = level, farm
		return k
	}
	collides := func(err error, what string) {
		t.Helper()
		wantCode(t, err, dcsync.InvalidArgument, what)
		if msg := err.Error(); !strings.Contains(msg, `"a#b"`) || !strings.Contains(msg, `"b#`+u+`"`) {
			t.Fatalf("%s: error %q does not name both identities", what, msg)
		}
	}
	collides(s.CreateLatch(ctx, k2, 7, time.Minute), "DC create of the colliding latch in dc1")
	collides(s.CreateLatch(ctx, at(k2, dcsync.DC, "dc2"), 7, time.Minute), "DC create of the colliding latch in dc2")
	collides(s.CreateLatch(ctx, at(k2, dcsync.XDC, "dc2"), 7, time.Minute), "XDC create of the colliding latch")
	_, err := s.EnsureLatch(ctx, at(k2, dcsync.DC, "dc2"), time.Minute)
	collides(err, "EnsureLatch of the colliding latch")
	_, err = s.AddLatch(ctx, k2, -1)
	collides(err, "DC AddLatch of the colliding latch")
	_, err = s.AddLatch(ctx, at(k2, dcsync.XDC, "dc2"), -1)
	collides(err, "XDC AddLatch of the colliding latch")
	after, aerr := c.Get(nil, rk)
	if aerr != nil {
		t.Fatalf("raw get: %v", aerr)
	}
	if after.Generation != before.Generation {
		t.Fatalf("refused writes changed the record: generation %d -> %d, bins %v", before.Generation, after.Generation, after.Bins)
	}
	got, err := s.ReadLatches(ctx, []dcsync.Key{k2, at(k2, dcsync.XDC, "dc1"), k1})
	must(t, err, "ReadLatches")
	if want := []driver.LatchCount{{}, {}, {Found: true, Count: 5}}; !equal(got, want) {
		t.Fatalf("ReadLatches(colliding DC, colliding XDC, owner) = %v, want %v", got, want)
	}
	if n, err := s.AddLatch(ctx, k1, -1); err != nil || n != 4 {
		t.Fatalf("owner's AddLatch = %d, %v; want 4", n, err)
	}
}

// TestInDoubtRetryAfterManyUpdates: a writer's update is in doubt while other writers
// update the same record hundreds of times (a busy latch: the retry comes a timeout
// later). Its retry must still be recognised and not applied again. A record that
// remembered the last 64 update ids forgot it (found by internal/chaos through the
// fault proxy: an XDC count-up-down latch under dropped replies was not linearizable).
func TestInDoubtRetryAfterManyUpdates(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := latchKey(level, "dc1", unique("busy-retry"))
		must(t, s.CreateLatch(ctx, k, 1000, time.Minute), "create")
		b := aerospike.NewOpID()
		n, err := aerospike.AddLatchWithOpID(ctx, s, k, -1, b)
		must(t, err, "B counts down (its reply is lost)")
		if n != 999 {
			t.Fatalf("B's count-down = %d, want 999", n)
		}
		for i := 0; i < 300; i++ {
			_, err := s.AddLatch(ctx, k, -1)
			must(t, err, "others count down")
		}
		n, err = aerospike.AddLatchWithOpID(ctx, s, k, -1, b)
		must(t, err, "B retries its count-down")
		if n != 699 {
			t.Fatalf("%v: B's retry after 300 other updates returned %d, want 699: its one count-down was applied twice", level, n)
		}
	}
}

// TestCountOverflowIsRefused: the server wraps an integer add past the int64 range; the
// store refuses such an update (InvalidArgument) and writes nothing.
func TestCountOverflowIsRefused(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := latchKey(level, "dc1", unique("overflow"))
		must(t, s.CreateLatch(ctx, k, math.MaxInt64-1, time.Minute), "create")
		if n, err := s.AddLatch(ctx, k, 1); err != nil || n != math.MaxInt64 {
			t.Fatalf("%v: AddLatch to MaxInt64 = %d, %v", level, n, err)
		}
		_, err := s.AddLatch(ctx, k, 1)
		wantCode(t, err, dcsync.InvalidArgument, level.String()+" AddLatch past MaxInt64")
		if got := javaCount(t, c, latchRecord(t, k.Name), dcsync.DC, "dc1"); got != math.MaxInt64 {
			t.Fatalf("%v: the refused update changed the count to %d", level, got)
		}
		if n, err := s.AddLatch(ctx, k, -1); err != nil || n != math.MaxInt64-1 {
			t.Fatalf("%v: AddLatch back down = %d, %v", level, n, err)
		}
	}
}

// TestDoneIsClosedByClose: package latch ends the Waits on a closed store through Done.
func TestDoneIsClosedByClose(t *testing.T) {
	s, err := aerospike.New(realClient(t), aerospike.Config{Namespace: namespace})
	must(t, err, "New")
	select {
	case <-s.Done():
		t.Fatal("Done is closed before Close")
	default:
	}
	must(t, s.Close(), "Close")
	select {
	case <-s.Done():
	default:
		t.Fatal("Close left Done open")
	}
}
