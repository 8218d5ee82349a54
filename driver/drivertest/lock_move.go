package drivertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// The LockMove part: driver.LockMover, on the stores that implement it. Each lock's
// outcome in a batched acquire or release is exactly that of the single operation
// (AcquireLock, ReleaseLock) applied in the order of the requests: fencing tokens
// strictly increase per key across batched and single acquires, a held lock is never
// taken (never two holders), a release frees only the owner's lock; a batch failing
// validation writes nothing.

// moveCase is one lock of a batch and the state the suite put it in.
type moveCase struct {
	what  string
	key   dcsync.Key
	last  uint64 // the greatest token given for the key so far (0: never taken)
	owner string // who holds it now ("" when free)
	mine  bool   // held by the batch's owner
}

// moveLocks makes one lock in each state a batch meets, under prefix: held by the
// batch's owner (DC and XDC), held by another owner, free (never taken), released, and
// lapsed (a 1 s lease; the caller sleeps 1.5 s, once for all its sets).
func moveLocks(t *testing.T, ctx context.Context, s driver.Store, h Harness, prefix, me string) []moveCase {
	t.Helper()
	key := func(lv dcsync.Level, what string) dcsync.Key {
		return dcsync.Key{Level: lv, Client: client, Farm: h.Farm, Name: prefix + "-" + what}
	}
	acquire := func(k dcsync.Key, owner string, ttl time.Duration) uint64 {
		st, err := s.AcquireLock(ctx, k, owner, ttl)
		must(t, err, "AcquireLock "+k.Name)
		return st.Token
	}
	var cs []moveCase
	for _, lv := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := key(lv, "mine-"+lv.String())
		cs = append(cs, moveCase{what: "held by the batch's owner at " + lv.String(), key: k, last: acquire(k, me, time.Minute), owner: me, mine: true})
	}
	k := key(dcsync.XDC, "other")
	cs = append(cs, moveCase{what: "held by another owner", key: k, last: acquire(k, "other", time.Minute), owner: "other"})
	cs = append(cs, moveCase{what: "free", key: key(dcsync.XDC, "free")})
	k = key(dcsync.XDC, "released")
	tok := acquire(k, "other", time.Minute)
	must(t, s.ReleaseLock(ctx, k, "other"), "ReleaseLock")
	cs = append(cs, moveCase{what: "released", key: k, last: tok})
	k = key(dcsync.XDC, "lapsed")
	cs = append(cs, moveCase{what: "lapsed", key: k, last: acquire(k, "other", time.Second)})
	return cs
}

// wantAcquired checks one acquire outcome (batch or single) of c by owner.
func wantAcquired(t *testing.T, c moveCase, owner string, st driver.LockState, err error, what string) {
	t.Helper()
	if c.owner != "" {
		wantCode(t, err, dcsync.LockUnavailable, fmt.Sprintf("%s: acquire of a lock %s", what, c.what))
		if st.Owner != c.owner || st.Token != c.last {
			t.Fatalf("%s: acquire of a lock %s reports the holder %q token %d, want %q, %d", what, c.what, st.Owner, st.Token, c.owner, c.last)
		}
		return
	}
	must(t, err, fmt.Sprintf("%s: acquire of a lock %s", what, c.what))
	if st.Owner != owner || st.Token <= c.last {
		t.Fatalf("%s: acquire of a lock %s = owner %q token %d, want %q and a token above %d", what, c.what, st.Owner, st.Token, owner, c.last)
	}
}

func runLockMove(t *testing.T, h Harness, s driver.Store, b driver.LockMover) {
	// Two identical sets of locks, one taken by a batch and one lock at a time: each
	// outcome of the batch is the single operation's, and what the batch leaves is what
	// the single operations leave.
	t.Run("AcquireIsTheSingleOp", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		batched, single := moveLocks(t, ctx, s, h, name+"-b", "me"), moveLocks(t, ctx, s, h, name+"-s", "me")
		time.Sleep(1500 * time.Millisecond) // the lapsed leases lapse
		reqs := make([]driver.LockAcquire, len(batched))
		for i, c := range batched {
			reqs[i] = driver.LockAcquire{Key: c.key, Owner: "new", TTL: time.Minute}
		}
		res, err := b.AcquireLocks(ctx, reqs)
		must(t, err, "AcquireLocks")
		if len(res) != len(reqs) {
			t.Fatalf("AcquireLocks returned %d results for %d locks", len(res), len(reqs))
		}
		for i, c := range batched {
			wantAcquired(t, c, "new", res[i].State, res[i].Err, "batch")
		}
		for _, c := range single {
			st, err := s.AcquireLock(ctx, c.key, "new", time.Minute)
			wantAcquired(t, c, "new", st, err, "single op")
		}
		for i, c := range batched {
			st, err := s.InspectLock(ctx, c.key)
			must(t, err, "InspectLock "+c.what)
			owner, tok := c.owner, c.last
			if c.owner == "" {
				owner, tok = "new", res[i].State.Token
			}
			if st.Owner != owner || st.Token != tok {
				t.Fatalf("after the batch the lock %s is held by %q token %d, want %q token %d", c.what, st.Owner, st.Token, owner, tok)
			}
			must(t, s.ReleaseLock(ctx, c.key, owner), "ReleaseLock")
		}
		res, err = b.AcquireLocks(ctx, nil)
		must(t, err, "AcquireLocks of no lock")
		if len(res) != 0 {
			t.Fatalf("AcquireLocks of no lock returned %d results", len(res))
		}
	})

	// A key named twice in one batch is taken by its first request only: the second
	// finds it held (never two holders).
	t.Run("AcquireTwiceInOneBatch", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		k := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: h.Farm, Name: unique(t)}
		res, err := b.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: "a", TTL: time.Minute}, {Key: k, Owner: "b", TTL: time.Minute}})
		must(t, err, "AcquireLocks")
		must(t, res[0].Err, "the first request")
		wantCode(t, res[1].Err, dcsync.LockUnavailable, "the second request for the same key")
		if res[1].State.Owner != "a" || res[1].State.Token != res[0].State.Token {
			t.Fatalf("the second request reports the holder %+v, want the first's %+v", res[1].State, res[0].State)
		}
		must(t, s.ReleaseLock(ctx, k, "a"), "ReleaseLock")
	})

	// Tokens strictly increase per key across batched and single acquires.
	t.Run("TokensIncrease", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		k := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: h.Farm, Name: unique(t)}
		var last uint64
		for i := range 3 {
			res, err := b.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: "me", TTL: time.Minute}})
			must(t, err, "AcquireLocks")
			must(t, res[0].Err, "AcquireLocks' result")
			if res[0].State.Token <= last {
				t.Fatalf("batch acquire %d: token %d, not above %d", i, res[0].State.Token, last)
			}
			last = res[0].State.Token
			rel, err := b.ReleaseLocks(ctx, []driver.LockRelease{{Key: k, Owner: "me"}})
			must(t, err, "ReleaseLocks")
			must(t, rel[0].Err, "ReleaseLocks' result")
			st, err := s.AcquireLock(ctx, k, "me", time.Minute)
			must(t, err, "AcquireLock")
			if st.Token <= last {
				t.Fatalf("single acquire %d after a batch: token %d, not above %d", i, st.Token, last)
			}
			last = st.Token
			must(t, s.ReleaseLock(ctx, k, "me"), "ReleaseLock")
		}
	})

	t.Run("ReleaseIsTheSingleOp", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		batched, single := moveLocks(t, ctx, s, h, name+"-b", "me"), moveLocks(t, ctx, s, h, name+"-s", "me")
		time.Sleep(1500 * time.Millisecond)
		reqs := make([]driver.LockRelease, len(batched))
		for i, c := range batched {
			reqs[i] = driver.LockRelease{Key: c.key, Owner: "me"}
		}
		res, err := b.ReleaseLocks(ctx, reqs)
		must(t, err, "ReleaseLocks")
		if len(res) != len(reqs) {
			t.Fatalf("ReleaseLocks returned %d results for %d locks", len(res), len(reqs))
		}
		check := func(c moveCase, err error, what string) {
			t.Helper()
			if c.mine {
				must(t, err, fmt.Sprintf("%s: release of a lock %s", what, c.what))
			} else {
				wantCode(t, err, dcsync.LockLost, fmt.Sprintf("%s: release of a lock %s", what, c.what))
			}
			st, err := s.InspectLock(ctx, c.key)
			if c.mine || c.owner == "" {
				wantCode(t, err, dcsync.NotFound, fmt.Sprintf("%s: InspectLock of the lock %s after the release", what, c.what))
				return
			}
			must(t, err, "InspectLock "+c.what)
			if st.Owner != c.owner || st.Token != c.last {
				t.Fatalf("%s: the release disturbed the lock %s: %+v", what, c.what, st)
			}
			must(t, s.ReleaseLock(ctx, c.key, c.owner), "ReleaseLock")
		}
		for i, c := range batched {
			check(c, res[i].Err, "batch")
		}
		for _, c := range single {
			check(c, s.ReleaseLock(ctx, c.key, "me"), "single op")
		}
		res, err = b.ReleaseLocks(ctx, nil)
		must(t, err, "ReleaseLocks of no lock")
		if len(res) != 0 {
			t.Fatalf("ReleaseLocks of no lock returned %d results", len(res))
		}
	})

	// A batch with one invalid request fails as a whole, with InvalidArgument, before
	// it writes anything: the free lock in it stays free, the held one held.
	t.Run("ValidationFailsTheBatch", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		free := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: h.Farm, Name: unique(t) + "-free"}
		held := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: h.Farm, Name: unique(t) + "-held"}
		_, err := s.AcquireLock(ctx, held, "me", time.Minute)
		must(t, err, "AcquireLock")
		empty := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: h.Farm}
		for _, bad := range []driver.LockAcquire{{Key: free, TTL: time.Minute}, {Key: free, Owner: "me"}, {Key: empty, Owner: "me", TTL: time.Minute}} {
			res, err := b.AcquireLocks(ctx, []driver.LockAcquire{{Key: free, Owner: "me", TTL: time.Minute}, bad})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("AcquireLocks with %+v", bad))
			if res != nil {
				t.Fatalf("AcquireLocks with %+v returned results beside its error", bad)
			}
		}
		_, err = s.InspectLock(ctx, free)
		wantCode(t, err, dcsync.NotFound, "InspectLock of the free lock of batches that failed validation")
		for _, bad := range []driver.LockRelease{{Key: held}, {Key: empty, Owner: "me"}} {
			res, err := b.ReleaseLocks(ctx, []driver.LockRelease{{Key: held, Owner: "me"}, bad})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ReleaseLocks with %+v", bad))
			if res != nil {
				t.Fatalf("ReleaseLocks with %+v returned results beside its error", bad)
			}
		}
		st, err := s.InspectLock(ctx, held)
		must(t, err, "InspectLock of the held lock of batches that failed validation")
		if st.Owner != "me" {
			t.Fatalf("the held lock is %+v after batches that failed validation", st)
		}
		must(t, s.ReleaseLock(ctx, held, "me"), "ReleaseLock")
	})
}
