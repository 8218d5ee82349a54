package aerospike_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// trips counts the commands a function sends through the proxy, by kind.
func trips(t *testing.T, p *faultProxy, f func()) proxyStats {
	t.Helper()
	before := p.Stats()
	f()
	after := p.Stats()
	return proxyStats{Reads: after.Reads - before.Reads, Writes: after.Writes - before.Writes,
		Deletes: after.Deletes - before.Deletes, Batches: after.Batches - before.Batches}
}

func wantTrips(t *testing.T, what string, got proxyStats, reads, writes, deletes, batches int64) {
	t.Helper()
	if got.Reads != reads || got.Writes != writes || got.Deletes != deletes || got.Batches != batches {
		t.Errorf("%s: %d reads, %d writes, %d deletes, %d batches; want %d, %d, %d, %d",
			what, got.Reads, got.Writes, got.Deletes, got.Batches, reads, writes, deletes, batches)
	}
}

// TestRoundTrips counts, through the proxy, the commands of each hot operation
// (docs/benchmarks-aerospike.md gives the same counts): acquire is two writes (take the
// lock record, number the acquisition), release one delete; a count-down one write; a
// count one read, also at level XDC while no cell has ended (then a batch of two more).
func TestRoundTrips(t *testing.T) {
	p := startProxy(t)
	s := newStore(t, dial(t, p.Addr()), aerospike.Config{})
	ctx := ctxT(t)
	lk := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: unique("trips")}
	wantTrips(t, "AcquireLock", trips(t, p, func() {
		_, err := s.AcquireLock(ctx, lk, "me", time.Minute)
		must(t, err, "acquire")
	}), 0, 2, 0, 0)
	wantTrips(t, "ReleaseLock", trips(t, p, func() { must(t, s.ReleaseLock(ctx, lk, "me"), "release") }), 0, 0, 1, 0)

	name := unique("trips")
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := latchKey(level, "dc1", name+level.String())
		must(t, s.CreateLatch(ctx, k, 10, time.Minute), "create")
		wantTrips(t, level.String()+" AddLatch", trips(t, p, func() {
			n, err := s.AddLatch(ctx, k, -1)
			if err != nil || n != 9 {
				t.Fatalf("count-down = %d, %v", n, err)
			}
		}), 0, 1, 0, 0)
		wantTrips(t, level.String()+" ReadLatches", trips(t, p, func() {
			got, err := s.ReadLatches(ctx, []dcsync.Key{k})
			if err != nil || got[0] != (driver.LatchCount{Found: true, Count: 9}) {
				t.Fatalf("count = %+v, %v", got, err)
			}
		}), 1, 0, 0, 0)
	}

	// A record with an ended cell: the XDC read is filtered out and read again with the
	// server's time; the ended cell does not count.
	must(t, s.CreateLatch(ctx, latchKey(dcsync.DC, "dc1", name+"-mixed"), 5, time.Minute), "create dc1")
	short := latchKey(dcsync.DC, "dc2", name+"-mixed")
	must(t, s.CreateLatch(ctx, short, 3, time.Second), "create dc2 for 1 s")
	for {
		got, err := s.ReadLatches(ctx, []dcsync.Key{short})
		must(t, err, "read dc2")
		if !got[0].Found {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantTrips(t, "XDC ReadLatches with an ended cell", trips(t, p, func() {
		got, err := s.ReadLatches(ctx, []dcsync.Key{latchKey(dcsync.XDC, "dc1", name+"-mixed")})
		if err != nil || got[0] != (driver.LatchCount{Found: true, Count: 5}) {
			t.Fatalf("XDC count with dc2's cell ended = %+v, %v; want 5", got, err)
		}
	}), 1, 0, 0, 1)
}

// TestLockBatcher: RefreshLocks and InspectLocks of N locks are one batch command each
// (one node), each result is the single operation's, and a lock lost in the middle of
// the batch changes nothing for the others.
func TestLockBatcher(t *testing.T) {
	p := startProxy(t)
	s := newStore(t, dial(t, p.Addr()), aerospike.Config{})
	other := newStore(t, realClient(t), aerospike.Config{})
	ctx := ctxT(t)
	const n = 50
	base := unique("batch")
	keys := make([]dcsync.Key, n)
	reqs := make([]driver.LockRefresh, n)
	tokens := make([]uint64, n)
	for i := range keys {
		keys[i] = dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: fmt.Sprintf("%s-%d", base, i)}
		if i%7 == 3 {
			keys[i].Level, keys[i].Farm = dcsync.XDC, "-"
		}
		st, err := s.AcquireLock(ctx, keys[i], fmt.Sprintf("owner-%d", i), 20*time.Second)
		must(t, err, "acquire")
		tokens[i] = st.Token
		reqs[i] = driver.LockRefresh{Key: keys[i], Owner: st.Owner, TTL: time.Minute}
	}
	var res []driver.LockResult
	wantTrips(t, "RefreshLocks", trips(t, p, func() {
		res, err := s.RefreshLocks(ctx, reqs)
		must(t, err, "RefreshLocks")
		for i, r := range res {
			if r.Err != nil || r.State.Owner != reqs[i].Owner || r.State.Token != 0 {
				t.Errorf("refresh of lock %d = %+v, %v; want its owner and token 0 (the batch reads no fence record)", i, r.State, r.Err)
			}
		}
	}), 0, 0, 0, 1)
	// Lock 20 is lost: released, and taken by another owner.
	const lost = 20
	must(t, s.ReleaseLock(ctx, keys[lost], reqs[lost].Owner), "release")
	thief, err := other.AcquireLock(ctx, keys[lost], "thief", time.Minute)
	must(t, err, "the other owner's acquire")
	// Lock 30 is free.
	const free = 30
	must(t, s.ReleaseLock(ctx, keys[free], reqs[free].Owner), "release")

	// The batch with a lost lock: its write is filtered out, and it is read, as
	// RefreshLock reads it, in a second command (one record: the client sends it as a
	// plain read).
	wantTrips(t, "RefreshLocks with a lost lock", trips(t, p, func() {
		res, err = s.RefreshLocks(ctx, reqs)
		must(t, err, "RefreshLocks")
	}), 1, 0, 0, 1)
	for i, r := range res {
		switch i {
		case lost, free:
			wantCode(t, r.Err, dcsync.LockLost, fmt.Sprintf("refresh of lock %d", i))
		default:
			if r.Err != nil || r.State.Owner != reqs[i].Owner || r.State.Token != 0 ||
				time.Until(r.State.Expires) < 50*time.Second {
				t.Errorf("refresh of lock %d = %+v, %v; want owner %s, token 0, a minute", i, r.State, r.Err, reqs[i].Owner)
			}
		}
	}
	// A second refresh to a shorter TTL writes nothing (more is left) and still
	// succeeds, in one batch and one more for the reads, as RefreshLock does.
	short := make([]driver.LockRefresh, len(reqs))
	copy(short, reqs)
	for i := range short {
		short[i].TTL = 30 * time.Second
	}
	wantTrips(t, "RefreshLocks with more than the TTL left", trips(t, p, func() {
		res, err = s.RefreshLocks(ctx, short)
		must(t, err, "RefreshLocks")
	}), 0, 0, 0, 2)
	for i, r := range res {
		single, serr := s.RefreshLock(ctx, short[i].Key, short[i].Owner, short[i].TTL)
		if dcsync.CodeOf(r.Err) != dcsync.CodeOf(serr) || r.State.Owner != single.Owner {
			t.Errorf("lock %d: batch %+v %v, single %+v %v", i, r.State, r.Err, single, serr)
		}
		if serr == nil && single.Token != tokens[i] {
			t.Errorf("lock %d: RefreshLock's token %d, want %d (it reads the fence record)", i, single.Token, tokens[i])
		}
	}

	wantTrips(t, "InspectLocks", trips(t, p, func() {
		res, err = s.InspectLocks(ctx, keys)
		must(t, err, "InspectLocks")
	}), 0, 0, 0, 1)
	for i, r := range res {
		single, serr := s.InspectLock(ctx, keys[i])
		if dcsync.CodeOf(r.Err) != dcsync.CodeOf(serr) || r.State.Owner != single.Owner || r.State.Token != single.Token {
			t.Errorf("lock %d: batch %+v %v, single %+v %v", i, r.State, r.Err, single, serr)
		}
		switch i {
		case lost:
			if r.State.Owner != "thief" || r.State.Token != thief.Token {
				t.Errorf("inspect of the lost lock = %+v, want the thief's", r.State)
			}
		case free:
			wantCode(t, r.Err, dcsync.NotFound, "inspect of the free lock")
		default:
			if r.Err != nil || r.State.Owner != reqs[i].Owner || r.State.Token != tokens[i] {
				t.Errorf("inspect of lock %d = %+v, %v", i, r.State, r.Err)
			}
		}
	}

	// Bad input anywhere fails the whole batch before any I/O.
	bad := append([]driver.LockRefresh{}, reqs...)
	bad[7].TTL = 0
	wantTrips(t, "RefreshLocks with a bad request", trips(t, p, func() {
		_, err = s.RefreshLocks(ctx, bad)
		wantCode(t, err, dcsync.InvalidArgument, "RefreshLocks with a zero TTL")
	}), 0, 0, 0, 0)
	for i := range keys {
		switch i {
		case lost:
			must(t, other.ReleaseLock(ctx, keys[i], "thief"), "release")
		case free:
		default:
			must(t, s.ReleaseLock(ctx, keys[i], reqs[i].Owner), "release")
		}
	}
}

// TestLockBatcherTenThousand: RefreshLocks and InspectLocks of 10,000 locks (some held,
// the others free) are one batch command each on a one-node cluster: a refresh sends
// one record per lock (no fence read) and an inspect two, and neither is cut into
// commands of a fixed number of records (the server sets no limit by default); a
// command the server refuses as too large is sent again in halves.
func TestLockBatcherTenThousand(t *testing.T) {
	p := startProxy(t)
	s := newStore(t, dial(t, p.Addr()), aerospike.Config{Timeout: 10 * time.Second})
	ctx := ctxT(t)
	const n, held = 10000, 20
	base := unique("tenk")
	keys := make([]dcsync.Key, n)
	reqs := make([]driver.LockRefresh, n)
	tokens := make([]uint64, held)
	for i := range keys {
		keys[i] = dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: fmt.Sprintf("%s-%d", base, i)}
		reqs[i] = driver.LockRefresh{Key: keys[i], Owner: fmt.Sprintf("owner-%d", i), TTL: time.Minute}
		if i%(n/held) == 0 {
			st, err := s.AcquireLock(ctx, keys[i], reqs[i].Owner, 20*time.Second)
			must(t, err, "acquire")
			tokens[i/(n/held)] = st.Token
		}
	}
	// A server whose batch-max-requests is below 10,000 refuses the command
	// (BATCH_MAX_REQUESTS_EXCEEDED, nothing applied): it is sent again in halves.
	p.RefuseResponses(1, 151, func(c command) bool { return c.Kind == "batch" })
	var res []driver.LockResult
	wantTrips(t, "RefreshLocks of 10,000 locks, the first command refused as too large", trips(t, p, func() {
		var err error
		res, err = s.RefreshLocks(ctx, reqs)
		must(t, err, "RefreshLocks")
	}), 0, 0, 0, 3)
	for i, r := range res {
		if i%(n/held) == 0 {
			if r.Err != nil || r.State.Owner != reqs[i].Owner {
				t.Errorf("refresh of held lock %d = %+v, %v", i, r.State, r.Err)
			}
		} else if dcsync.CodeOf(r.Err) != dcsync.LockLost {
			t.Fatalf("refresh of free lock %d = %+v, %v; want LockLost", i, r.State, r.Err)
		}
	}
	wantTrips(t, "RefreshLocks of 10,000 locks", trips(t, p, func() {
		var err error
		res, err = s.RefreshLocks(ctx, reqs)
		must(t, err, "RefreshLocks")
	}), 0, 0, 0, 1)
	for i, r := range res {
		if i%(n/held) == 0 {
			if r.Err != nil || r.State.Owner != reqs[i].Owner {
				t.Errorf("refresh of held lock %d = %+v, %v", i, r.State, r.Err)
			}
		} else if dcsync.CodeOf(r.Err) != dcsync.LockLost {
			t.Fatalf("refresh of free lock %d = %+v, %v; want LockLost", i, r.State, r.Err)
		}
	}
	wantTrips(t, "InspectLocks of 10,000 locks", trips(t, p, func() {
		var err error
		res, err = s.InspectLocks(ctx, keys)
		must(t, err, "InspectLocks")
	}), 0, 0, 0, 1)
	for i, r := range res {
		if i%(n/held) == 0 {
			if r.Err != nil || r.State.Owner != reqs[i].Owner || r.State.Token != tokens[i/(n/held)] {
				t.Errorf("inspect of held lock %d = %+v, %v; want token %d", i, r.State, r.Err, tokens[i/(n/held)])
			}
			must(t, s.ReleaseLock(ctx, keys[i], reqs[i].Owner), "release")
		} else if dcsync.CodeOf(r.Err) != dcsync.NotFound {
			t.Fatalf("inspect of free lock %d = %+v, %v; want NotFound", i, r.State, r.Err)
		}
	}
}
