package aerospike_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/layout"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/aerospike"
)

const (
	client   = "interop"
	latchSet = "D_LTCH#" + aerospike.DefaultLatchSetSuffix
	dc1Locks = "DC#dc1#" + aerospike.DefaultLockSetSuffix
	xdcLocks = "XDC#" + aerospike.DefaultLockSetSuffix
	javaTTL  = 60
)

func key(t testing.TB, set string, user string) *as.Key {
	t.Helper()
	k, err := as.NewKey(namespace, set, user)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// latchRecord is the key of the latch record of name (client "interop").
func latchRecord(t testing.TB, name string) *as.Key {
	return key(t, latchSet, layout.AerospikeLatchKey(client, name))
}

func rc(err error) types.ResultCode {
	var ae *as.AerospikeError
	if errors.As(err, &ae) {
		return ae.ResultCode
	}
	return types.OK
}

func wantCode(t testing.TB, err error, code dcsync.Code, what string) {
	t.Helper()
	if dcsync.CodeOf(err) != code {
		t.Fatalf("%s: got %v (code %v), want code %v", what, err, dcsync.CodeOf(err), code)
	}
}

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func latchKey(level dcsync.Level, farm, name string) dcsync.Key {
	return dcsync.Key{Level: level, Client: client, Farm: farm, Name: name}
}

// javaCreateLatch writes a latch exactly as the Java library's initialize does: a
// CREATE_ONLY put of count#<farm> with the configured TTL (AerospikeLatchStorage.java:69-78).
func javaCreateLatch(c *as.Client, k *as.Key, farm string, count int64) error {
	wp := as.NewWritePolicy(0, javaTTL)
	wp.RecordExistsAction = as.CREATE_ONLY
	return c.Put(wp, k, as.BinMap{"count#" + farm: count})
}

// javaUpdate counts a latch up or down exactly as the Java library's updateCount does:
// an UPDATE_ONLY operate add on count#<farm> that also sets the record's TTL to the
// configured one (AerospikeLatchStorage.java:146-155).
func javaUpdate(c *as.Client, k *as.Key, farm string, delta int64) error {
	wp := as.NewWritePolicy(0, javaTTL)
	wp.RecordExistsAction = as.UPDATE_ONLY
	_, err := c.Operate(wp, k, as.AddOp(as.NewBin("count#"+farm, delta)))
	return err
}

// javaAcquire takes a lock exactly as the Java lock manager does: a put of
// <farm>##data and <farm>##uat that expects generation 0 (AerospikeStore.java:56-69).
func javaAcquire(c *as.Client, k *as.Key, farm string) error {
	wp := as.NewWritePolicy(0, 30)
	wp.GenerationPolicy = as.EXPECT_GEN_EQUAL
	return c.Put(wp, k, as.BinMap{farm + "##data": 1, farm + "##uat": time.Now().UnixMilli()})
}

// javaCount reads a latch's count as the Java library does: the farm's bin at DC, the
// sum of every bin whose name contains "count#" at XDC (AerospikeLatchStorage.java:105-118).
func javaCount(t testing.TB, c *as.Client, k *as.Key, level dcsync.Level, farm string) int64 {
	t.Helper()
	rec, err := c.Get(nil, k)
	must(t, err, "raw get")
	if level == dcsync.DC {
		n, ok := rec.Bins["count#"+farm].(int)
		if !ok {
			t.Fatalf("bin count#%s = %#v, not an integer", farm, rec.Bins["count#"+farm])
		}
		return int64(n)
	}
	var sum int64
	for name, v := range rec.Bins {
		if strings.Contains(name, "count#") {
			sum += int64(v.(int))
		}
	}
	return sum
}

func TestJavaLayoutLatchInterop(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	name := unique("java-latch")

	// A latch the Java library created is read, counted down and respected by dcsync.
	jk := latchRecord(t, name)
	must(t, javaCreateLatch(c, jk, "dc1", 5), "java create")
	dc := latchKey(dcsync.DC, "dc1", name)
	xdc := latchKey(dcsync.XDC, "dc1", name)
	got, err := s.ReadLatches(ctx, []dcsync.Key{dc, xdc, latchKey(dcsync.DC, "dc2", name)})
	must(t, err, "ReadLatches")
	if want := []driver.LatchCount{{Found: true, Count: 5}, {Found: true, Count: 5}, {}}; !equal(got, want) {
		t.Fatalf("ReadLatches = %v, want %v", got, want)
	}
	// Another Java farm counts down (an add creates its cell): XDC sums both cells.
	must(t, javaUpdate(c, jk, "dc2", -2), "java count-down in dc2")
	m, err := latch.New(s, client, "dc1")
	must(t, err, "latch.New")
	l, err := m.GetCountDown(name)
	must(t, err, "GetCountDown")
	if n, err := l.CountDown(ctx); err != nil || n != 4 {
		t.Fatalf("CountDown of a Java latch = %d, %v; want 4", n, err)
	}
	lx, err := m.GetCountDown(name, latch.Level(dcsync.XDC))
	must(t, err, "GetCountDown XDC")
	if n, err := lx.Count(ctx); err != nil || n != 2 {
		t.Fatalf("XDC Count = %d, %v; want 4 + -2 = 2", n, err)
	}
	if n, err := lx.CountDown(ctx); err != nil || n != 1 {
		t.Fatalf("XDC CountDown of a Java latch = %d, %v; want 1", n, err)
	}
	if n := javaCount(t, c, jk, dcsync.DC, "dc1"); n != 3 {
		t.Fatalf("Java reader sees count#dc1 = %d, want 3", n)
	}
	if n := javaCount(t, c, jk, dcsync.XDC, ""); n != 1 {
		t.Fatalf("Java XDC reader sees %d, want 1", n)
	}
	wantCode(t, s.CreateLatch(ctx, dc, 9, time.Minute), dcsync.AlreadyExists, "DC create over a Java latch")
	wantCode(t, s.CreateLatch(ctx, xdc, 9, time.Minute), dcsync.AlreadyExists, "XDC create over a Java latch")
	if n := javaCount(t, c, jk, dcsync.DC, "dc1"); n != 3 {
		t.Fatalf("a refused create changed count#dc1 to %d", n)
	}
	// A DC create in a third farm adds that farm's cell only, and extends the record's
	// TTL to its own (never shortens it).
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc3", name), 7, time.Hour), "DC create in dc3")
	if n := javaCount(t, c, jk, dcsync.DC, "dc3"); n != 7 {
		t.Fatalf("count#dc3 = %d, want 7", n)
	}
	if hdr, err := c.GetHeader(nil, jk); err != nil || hdr.Expiration < 3500 {
		t.Fatalf("record TTL after a 1h DC create = %v, %v; want about 3600s", hdr, err)
	}

	// A latch dcsync created looks like a Java latch to a Java reader, and a Java
	// update of it counts.
	gname := unique("go-latch")
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", gname), 3, time.Minute), "dcsync create")
	gk := latchRecord(t, gname)
	if n := javaCount(t, c, gk, dcsync.DC, "dc1"); n != 3 {
		t.Fatalf("Java reader sees %d, want 3", n)
	}
	if n, err := s.AddLatch(ctx, latchKey(dcsync.XDC, "dc2", gname), -1); err != nil || n != 2 {
		t.Fatalf("XDC AddLatch = %d, %v; want 2", n, err)
	}
	if n := javaCount(t, c, gk, dcsync.XDC, ""); n != 2 {
		t.Fatalf("Java XDC reader sees %d, want 2", n)
	}
	if err := javaCreateLatch(c, gk, "dc1", 10); rc(err) != types.KEY_EXISTS_ERROR {
		t.Fatalf("Java create over a dcsync latch = %v, want KEY_EXISTS_ERROR", err)
	}
	hdr, err := c.GetHeader(nil, gk)
	must(t, err, "raw get header")
	if hdr.Expiration < 50 || hdr.Expiration > 61 {
		t.Fatalf("record TTL = %ds, want the latch's 60s (+1)", hdr.Expiration)
	}
	must(t, javaUpdate(c, gk, "dc3", -1), "Java count-down from a farm without a cell")
	if n, err := s.AddLatch(ctx, latchKey(dcsync.XDC, "dc1", gname), -1); err != nil || n != 0 {
		t.Fatalf("XDC AddLatch after a Java update = %d, %v; want 3-1-1-1 = 0", n, err)
	}
	got, err = s.ReadLatches(ctx, []dcsync.Key{latchKey(dcsync.XDC, "dc1", gname), latchKey(dcsync.DC, "dc3", gname)})
	must(t, err, "ReadLatches")
	if want := []driver.LatchCount{{Found: true, Count: 0}, {Found: true, Count: -1}}; !equal(got, want) {
		t.Fatalf("ReadLatches after a Java update = %v, want %v", got, want)
	}
}

func equal(a, b []driver.LatchCount) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestJavaLayoutLockInterop also checks, on the real server, the lock code's filter
// expressions over bins a Java lock does not have (owner, lease): a missing bin makes
// a comparison "unknown", which filters the record out (FILTERED_OUT), and an or whose
// first operand is true never looks at the second.
func TestJavaLayoutLockInterop(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)

	// A lock a Java client holds is respected by dcsync.
	jname := unique("java-lock")
	jk := key(t, dc1Locks, client+"#"+jname)
	must(t, javaAcquire(c, jk, "dc1"), "java acquire")
	k := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: jname}
	st, err := s.AcquireLock(ctx, k, "go-owner", time.Minute)
	wantCode(t, err, dcsync.LockUnavailable, "AcquireLock over a Java lock")
	if st.Owner != "" || st.Token != 0 {
		t.Fatalf("holder state of a Java lock = %+v, want no owner and token 0", st)
	}
	st, err = s.InspectLock(ctx, k)
	must(t, err, "InspectLock of a Java lock")
	if st.Owner != "" || st.Token != 0 || time.Until(st.Expires) < 20*time.Second {
		t.Fatalf("InspectLock of a Java lock = %+v", st)
	}
	wantCode(t, s.ReleaseLock(ctx, k, "go-owner"), dcsync.LockLost, "ReleaseLock of a Java lock")
	_, err = s.RefreshLock(ctx, k, "go-owner", time.Minute)
	wantCode(t, err, dcsync.LockLost, "RefreshLock of a Java lock")
	m, err := lock.New(s, client, "dc1")
	must(t, err, "lock.New")
	_, err = m.TryAcquire(ctx, jname)
	wantCode(t, err, dcsync.LockUnavailable, "TryAcquire over a Java lock")
	rec, err := c.Get(nil, jk)
	must(t, err, "raw get")
	if rec.Generation != 1 || len(rec.Bins) != 2 {
		t.Fatalf("dcsync changed the Java lock: gen %d bins %v", rec.Generation, rec.Bins)
	}

	// A lock dcsync holds looks held to a Java client, at both levels.
	gname := unique("go-lock")
	for _, tc := range []struct {
		level dcsync.Level
		set   string
	}{{dcsync.DC, dc1Locks}, {dcsync.XDC, xdcLocks}} {
		before := time.Now().UnixMilli()
		l, err := m.TryAcquire(ctx, gname, lock.Level(tc.level))
		must(t, err, "TryAcquire")
		gk := key(t, tc.set, client+"#"+gname)
		rec, err := c.Get(nil, gk)
		must(t, err, "raw get of the dcsync lock")
		uat, _ := rec.Bins["dc1##uat"].(int)
		if rec.Bins["dc1##data"] != 1 || int64(uat) < before || int64(uat) > time.Now().UnixMilli() {
			t.Fatalf("%v lock bins = %v, want dc1##data=1 and dc1##uat=now", tc.level, rec.Bins)
		}
		acq, _ := rec.Bins[aerospike.AcqBin].(int)
		if rec.Bins["dcsync_owner"] != l.Owner() || acq == 0 {
			t.Fatalf("%v lock bins = %v, want owner %s and an acquisition id", tc.level, rec.Bins, l.Owner())
		}
		if err := javaAcquire(c, gk, "dc2"); rc(err) != types.GENERATION_ERROR {
			t.Fatalf("Java acquire of a dcsync lock = %v, want GENERATION_ERROR", err)
		}
		lk := dcsync.Key{Level: tc.level, Client: client, Farm: "dc1", Name: gname}
		fence, err := c.Get(nil, key(t, "F#"+tc.set, layout.IdentityKey(lk)))
		must(t, err, "raw get of the fence record")
		numbers, _ := fence.Bins[aerospike.AcqsBin].(map[any]any)
		if fence.Bins["fence"] != int(l.Token()) || numbers[acq] != int(l.Token()) || fence.Expiration != as.TTLDontExpire {
			t.Fatalf("fence record = %v (ttl %d), want fence=%d and that number for acquisition %d, never expiring",
				fence.Bins, fence.Expiration, l.Token(), acq)
		}
		must(t, l.Release(ctx), "Release")
		must(t, javaAcquire(c, gk, "dc2"), "Java acquire after dcsync released")
		_, err = m.TryAcquire(ctx, gname, lock.Level(tc.level))
		wantCode(t, err, dcsync.LockUnavailable, "dcsync acquire while Java holds it")
	}
}

// inDoubtStore returns a store whose tries time out fast, reaching the real server
// through a fault proxy.
func inDoubtStore(t *testing.T) (*faultProxy, *as.Client, *aerospike.Store) {
	p := startProxy(t)
	c := dial(t, p.Addr())
	s := newStore(t, c, aerospike.Config{Timeout: 150 * time.Millisecond})
	return p, c, s
}

func TestInDoubtLatch(t *testing.T) {
	p, c, s := inDoubtStore(t)
	ctx := ctxT(t)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		name := unique("latch-" + level.String())
		k := latchKey(level, "dc1", name)
		rk := latchRecord(t, name)

		// Create whose reply is lost: the retry finds the latch, and it is ours.
		p.DropResponses(1, writesTo(latchSet))
		must(t, s.CreateLatch(ctx, k, 10, time.Minute), "CreateLatch with a lost reply")
		if n := javaCount(t, c, rk, dcsync.DC, "dc1"); n != 10 {
			t.Fatalf("count after in-doubt create = %d, want 10", n)
		}
		// Updates whose replies are lost once, then twice in a row: applied exactly once.
		want := int64(10)
		for _, drops := range []int{1, 2, 1} {
			before := p.Stats().Dropped
			p.DropResponses(drops, writesTo(latchSet))
			n, err := s.AddLatch(ctx, k, -1)
			must(t, err, "AddLatch with lost replies")
			want--
			if n != want {
				t.Fatalf("AddLatch returned %d, want %d", n, want)
			}
			if got := javaCount(t, c, rk, dcsync.DC, "dc1"); got != want {
				t.Fatalf("stored count = %d after %d lost replies, want %d (applied exactly once)", got, drops, want)
			}
			if d := p.Stats().Dropped - before; d != int64(drops) {
				t.Fatalf("proxy dropped %d replies, want %d", d, drops)
			}
		}
		// EnsureLatch whose reply is lost reports that it created the latch.
		ek := latchKey(level, "dc1", name+"-ensure")
		p.DropResponses(1, writesTo(latchSet))
		created, err := s.EnsureLatch(ctx, ek, time.Minute)
		if err != nil || !created {
			t.Fatalf("EnsureLatch with a lost reply = %v, %v; want true, nil", created, err)
		}
		created, err = s.EnsureLatch(ctx, ek, time.Minute)
		if err != nil || created {
			t.Fatalf("second EnsureLatch = %v, %v; want false, nil", created, err)
		}
	}
	// A DC create over a record that exists (another farm's cell), replies lost.
	shared := unique("shared")
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc2", shared), 1, time.Minute), "create dc2")
	p.DropResponses(2, writesTo(latchSet))
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", shared), 4, time.Minute), "DC create in dc1 with lost replies")
	wantCode(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", shared), 4, time.Minute), dcsync.AlreadyExists, "create again")

	// Every reply lost: the caller learns the outcome is unknown, and a later read
	// shows the update applied at most once.
	k := latchKey(dcsync.DC, "dc1", shared)
	p.DropResponses(100, writesTo(latchSet))
	_, err := s.AddLatch(ctx, k, -1)
	wantCode(t, err, dcsync.RetriesExhausted, "AddLatch with every reply lost")
	if !errors.Is(err, dcsync.ErrConnection) {
		t.Fatalf("exhausted retries do not wrap the connection error: %v", err)
	}
	p.ClearDrops()
	if n, err := s.ReadLatches(ctx, []dcsync.Key{k}); err != nil || n[0].Count != 3 {
		t.Fatalf("count after an update whose every try was lost = %v, %v; want 3 (applied once)", n, err)
	}
}

func TestInDoubtLock(t *testing.T) {
	p, c, s := inDoubtStore(t)
	ctx := ctxT(t)
	name := unique("l")
	k := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: name}
	rk := key(t, dc1Locks, client+"#"+name)
	for i, drop := range []struct {
		n     int
		match func(command) bool
	}{
		{1, writesTo(dc1Locks)},        // the gen-0 put
		{1, writesTo("F#" + dc1Locks)}, // the fence increment: the retry is filtered and reads the number
		{2, writesTo("F#" + dc1Locks)}, // twice
	} {
		p.DropResponses(drop.n, drop.match)
		st, err := s.AcquireLock(ctx, k, "owner-a", time.Minute)
		must(t, err, "AcquireLock with a lost reply")
		got, err := s.InspectLock(ctx, k)
		must(t, err, "InspectLock")
		if got.Owner != "owner-a" || got.Token != st.Token || st.Token == 0 {
			t.Fatalf("case %d: holder %+v, acquired %+v", i, got, st)
		}
		_, err = s.AcquireLock(ctx, k, "owner-b", time.Minute)
		wantCode(t, err, dcsync.LockUnavailable, "second holder")
		// Release whose reply is lost: released, exactly once.
		p.DropResponses(1, func(c command) bool { return c.Kind == "delete" })
		must(t, s.ReleaseLock(ctx, k, "owner-a"), "ReleaseLock with a lost reply")
		if _, err := c.Get(nil, rk); rc(err) != types.KEY_NOT_FOUND_ERROR {
			t.Fatalf("lock record after release: %v", err)
		}
		wantCode(t, s.ReleaseLock(ctx, k, "owner-a"), dcsync.LockLost, "second release")
	}
	if d := p.Stats().Dropped; d != 7 {
		t.Fatalf("proxy dropped %d replies, want 7", d)
	}
	// Tokens kept increasing through it all.
	st, err := s.AcquireLock(ctx, k, "owner-c", time.Minute)
	must(t, err, "AcquireLock")
	if st.Token < 4 {
		t.Fatalf("token %d after three acquisitions", st.Token)
	}
}

func TestServerRestartAndDisconnects(t *testing.T) {
	p := startProxy(t)
	c := dial(t, p.Addr())
	s := newStore(t, c, aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond})
	ctx := ctxT(t)
	lm, err := lock.New(s, client, "dc1")
	must(t, err, "lock.New")
	m, err := latch.New(s, client, "dc1")
	must(t, err, "latch.New")
	l, err := m.CreateCountDown(ctx, unique("restart"), 10)
	must(t, err, "create")
	lname := unique("restart")
	want := int64(10)
	for i, disrupt := range []func(){
		p.CloseConnections,
		func() { must(t, p.Restart(), "Restart") },
		p.CloseConnections,
		func() { must(t, p.Restart(), "Restart") },
	} {
		disrupt()
		n, err := l.CountDown(ctx)
		must(t, err, "CountDown after a disruption")
		want--
		if n != want {
			t.Fatalf("disruption %d: CountDown = %d, want %d", i, n, want)
		}
		h, err := lm.TryAcquire(ctx, lname)
		must(t, err, "TryAcquire after a disruption")
		disrupt()
		must(t, h.Release(ctx), "Release after a disruption")
	}
	if n, err := l.Count(ctx); err != nil || n != want {
		t.Fatalf("Count = %d, %v; want %d", n, err, want)
	}
}

func TestBadInputDoesNoIO(t *testing.T) {
	p := startProxy(t)
	c := dial(t, p.Addr())
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	before := p.Stats()
	long := strings.Repeat("s", 60)
	ls := newStore(t, c, aerospike.Config{LockSetSuffix: long[:55]}) // XDC#+55 fits, DC#dc1#+55 does not
	for _, tc := range []struct {
		s *aerospike.Store
		k dcsync.Key
	}{
		{s, dcsync.Key{Level: dcsync.DC, Client: client, Farm: "farm-too-long", Name: "n"}},
		{s, dcsync.Key{Level: dcsync.XDC, Client: client, Farm: "farm-too-long", Name: "n"}},
		{s, dcsync.Key{Level: dcsync.DC, Client: client, Farm: "farm-ten10", Name: "n"}}, // farm-ten10##data is 16 bytes
		{s, dcsync.Key{Level: dcsync.DC, Client: "a\x01b", Farm: "dc1", Name: "n"}},
		{s, dcsync.Key{Level: 0, Client: client, Farm: "dc1", Name: "n"}},
		{ls, dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: "n"}},
	} {
		what := tc.k.String()
		wantCode(t, tc.s.CreateLatch(ctx, tc.k, 1, time.Minute), dcsync.InvalidArgument, "CreateLatch "+what)
		_, err := tc.s.EnsureLatch(ctx, tc.k, time.Minute)
		wantCode(t, err, dcsync.InvalidArgument, "EnsureLatch "+what)
		_, err = tc.s.AddLatch(ctx, tc.k, -1)
		wantCode(t, err, dcsync.InvalidArgument, "AddLatch "+what)
		_, err = tc.s.ReadLatches(ctx, []dcsync.Key{latchKey(dcsync.DC, "dc1", "ok"), tc.k})
		wantCode(t, err, dcsync.InvalidArgument, "ReadLatches "+what)
		_, err = tc.s.AcquireLock(ctx, tc.k, "owner", time.Minute)
		wantCode(t, err, dcsync.InvalidArgument, "AcquireLock "+what)
		_, err = tc.s.RefreshLock(ctx, tc.k, "owner", time.Minute)
		wantCode(t, err, dcsync.InvalidArgument, "RefreshLock "+what)
		wantCode(t, tc.s.ReleaseLock(ctx, tc.k, "owner"), dcsync.InvalidArgument, "ReleaseLock "+what)
		_, err = tc.s.InspectLock(ctx, tc.k)
		wantCode(t, err, dcsync.InvalidArgument, "InspectLock "+what)
	}
	good := latchKey(dcsync.DC, "dc1", "ok")
	wantCode(t, s.CreateLatch(ctx, good, -1, time.Minute), dcsync.InvalidArgument, "negative count")
	wantCode(t, s.CreateLatch(ctx, good, 1, 0), dcsync.InvalidArgument, "zero TTL")
	_, err := s.AcquireLock(ctx, good, "bad owner", time.Minute)
	wantCode(t, err, dcsync.InvalidArgument, "owner with a space")
	_, err = s.AcquireLock(ctx, good, "owner", 0)
	wantCode(t, err, dcsync.InvalidArgument, "zero lease")
	_, err = lock.New(s, client, "farm-too-long")
	if err == nil {
		m, _ := lock.New(s, client, "farm-too-long")
		_, err = m.TryAcquire(ctx, "n")
	}
	wantCode(t, err, dcsync.InvalidArgument, "lock manager in farm-too-long")
	after := p.Stats()
	if after.Reads != before.Reads || after.Writes != before.Writes || after.Deletes != before.Deletes || after.Batches != before.Batches {
		t.Fatalf("the server saw commands for bad input: before %+v, after %+v", before, after)
	}
}

func TestBadConfig(t *testing.T) {
	p := startProxy(t)
	c := dial(t, p.Addr())
	for _, cfg := range []aerospike.Config{
		{},
		{Namespace: strings.Repeat("n", 32)},
		{Namespace: "a:b"},
		{Namespace: "test", Attempts: -1},
		{Namespace: "test", RetryDelay: -time.Second},
		{Namespace: "test", Timeout: -time.Second},
		{Namespace: "test", OpIDsKept: -1},
		{Namespace: "test", OpIDsKept: 1 << 20},
		{Namespace: "test", LatchSetSuffix: strings.Repeat("s", 60)},
		{Namespace: "test", LockSetSuffix: strings.Repeat("s", 60)},
		{Namespace: "test", LockSetSuffix: "a;b"},
	} {
		if _, err := aerospike.New(c, cfg); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("New(%+v) = %v, want InvalidArgument", cfg, err)
		}
	}
	if _, err := aerospike.New(nil, aerospike.Config{Namespace: "test"}); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Errorf("New(nil client) = %v", err)
	}
	ctx := ctxT(t)
	conns := p.Stats().Connections
	for _, raw := range []string{
		"redis://" + p.Addr() + "/test",
		"aerospike:///test",
		"aerospike://127.0.0.1:99999/test",
		"aerospike://" + p.Addr() + "/",
		"aerospike://" + p.Addr() + "/test?attempts=0",
		"aerospike://" + p.Addr() + "/test?attempts=x",
		"aerospike://" + p.Addr() + "/test?timeout=fast",
		"aerospike://" + p.Addr() + "/test?bogus=1",
	} {
		u, err := url.Parse(raw)
		must(t, err, raw)
		if _, err := aerospike.OpenURL(ctx, u); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("OpenURL(%s) = %v, want InvalidArgument", raw, err)
		}
	}
	if st := p.Stats(); st.Connections != conns {
		t.Fatalf("bad URLs dialled the server: %d connections, had %d", st.Connections, conns)
	}
	// Nothing listens on a closed proxy's port: Connection.
	dead := startProxy(t)
	addr := dead.Addr()
	dead.Close()
	u, _ := url.Parse("aerospike://" + addr + "/test?timeout=200ms")
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := aerospike.OpenURL(cctx, u); dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("OpenURL of a dead server = %v, want Connection", err)
	}
	// A good URL: the store owns and closes its client.
	suffix := unique("l")
	u, _ = url.Parse("aerospike://" + realServer(t) + "/" + namespace + "?latch_set_suffix=" + suffix + "&lock_set_suffix=k&attempts=3&timeout=500ms")
	s, err := aerospike.OpenURL(ctx, u)
	must(t, err, "OpenURL")
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", "url"), 2, time.Minute), "CreateLatch")
	if _, err := c.Get(nil, key(t, "D_LTCH#"+suffix, "D_LTCH#"+client+"#url")); err != nil {
		t.Fatalf("latch not in set D_LTCH#%s: %v", suffix, err)
	}
	must(t, s.Close(), "Close")
	must(t, s.Close(), "second Close")
	if s.Client().IsConnected() {
		t.Fatal("Close left the owned client connected")
	}
	_, err = s.ReadLatches(ctx, []dcsync.Key{latchKey(dcsync.DC, "dc1", "url")})
	wantCode(t, err, dcsync.Connection, "ReadLatches after Close")
}

func TestTTLRoundsUp(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	name := unique("ttl")
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", name), 1, 2100*time.Millisecond), "create")
	hdr, err := c.GetHeader(nil, latchRecord(t, name))
	must(t, err, "get header")
	if hdr.Expiration < 3 {
		t.Fatalf("record TTL of a 2.1s latch = %ds, want at least 3 (rounded up)", hdr.Expiration)
	}
}
