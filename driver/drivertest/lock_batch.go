package drivertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// The LockBatch part: driver.LockBatcher, on the stores that implement it. Each lock's
// outcome in a batch is exactly that of the single operation; a batch that fails
// validation writes nothing; a batch refresh never leaves a lease ending before the end
// a refresh of it reported.

// skew is how far a lease end read back may lie before the end a refresh reported: the
// store may keep ends in whole milliseconds, or by a server's clock.
const skew = time.Second

// batchCase is one lock of a batch and the state the suite put it in.
type batchCase struct {
	what  string
	key   dcsync.Key
	owner string // the owner the batch names
	held  bool   // owner holds the lock: a refresh succeeds, an inspect finds owner
	token uint64 // the holder's token, if anyone holds it
	other string // another owner holds it
}

// batchLocks makes one lock in each state a batch meets, under prefix: held by the
// batch's owner (at DC and XDC), held by another owner, free (never taken), released,
// and lapsed (a 1 s lease, 1.5 s ago; the caller sleeps, once for all its sets).
func batchLocks(t *testing.T, ctx context.Context, s driver.Store, h Harness, prefix string) []batchCase {
	t.Helper()
	key := func(lv dcsync.Level, what string) dcsync.Key {
		return dcsync.Key{Level: lv, Client: client, Farm: h.Farm, Name: prefix + "-" + what}
	}
	acquire := func(k dcsync.Key, owner string, ttl time.Duration) uint64 {
		st, err := s.AcquireLock(ctx, k, owner, ttl)
		must(t, err, "AcquireLock "+k.Name)
		return st.Token
	}
	var cs []batchCase
	for _, lv := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := key(lv, "held-"+lv.String())
		cs = append(cs, batchCase{what: "held " + lv.String(), key: k, owner: "me", held: true, token: acquire(k, "me", time.Minute)})
	}
	k := key(dcsync.DC, "other")
	cs = append(cs, batchCase{what: "held by another owner", key: k, owner: "me", token: acquire(k, "other", time.Minute), other: "other"})
	cs = append(cs, batchCase{what: "free", key: key(dcsync.DC, "free"), owner: "me"})
	k = key(dcsync.DC, "released")
	acquire(k, "me", time.Minute)
	must(t, s.ReleaseLock(ctx, k, "me"), "ReleaseLock")
	cs = append(cs, batchCase{what: "released", key: k, owner: "me"})
	k = key(dcsync.DC, "lapsed")
	acquire(k, "me", time.Second)
	cs = append(cs, batchCase{what: "lapsed", key: k, owner: "me"})
	return cs
}

func refreshes(cs []batchCase, ttl time.Duration) []driver.LockRefresh {
	out := make([]driver.LockRefresh, len(cs))
	for i, c := range cs {
		out[i] = driver.LockRefresh{Key: c.key, Owner: c.owner, TTL: ttl}
	}
	return out
}

// wantRefreshed checks one refresh outcome (batch or single) of c sent at or after
// before and returned at or before after.
func wantRefreshed(t *testing.T, c batchCase, st driver.LockState, err error, ttl time.Duration, before, after time.Time, batch bool, what string) {
	t.Helper()
	if !c.held {
		wantCode(t, err, dcsync.LockLost, fmt.Sprintf("%s: refresh of a lock %s", what, c.what))
		return
	}
	must(t, err, fmt.Sprintf("%s: refresh of a lock %s", what, c.what))
	if st.Owner != c.owner || st.Token != c.token && !(batch && st.Token == 0) {
		t.Fatalf("%s: refresh of a lock %s = owner %q token %d, want %q, %d", what, c.what, st.Owner, st.Token, c.owner, c.token)
	}
	if st.Expires.Before(before.Add(ttl-skew)) || st.Expires.After(after.Add(ttl+skew)) {
		t.Fatalf("%s: refresh of a lock %s reports the lease ending at %v, want within %v of [%v, %v] + %v",
			what, c.what, st.Expires, skew, before, after, ttl)
	}
}

func runLockBatch(t *testing.T, h Harness, s driver.Store, b driver.LockBatcher) {
	// Two identical sets of locks, one renewed by a batch and one lock at a time: each
	// outcome of the batch is the single operation's.
	t.Run("RefreshIsTheSingleOp", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		batched, single := batchLocks(t, ctx, s, h, name+"-b"), batchLocks(t, ctx, s, h, name+"-s")
		time.Sleep(1500 * time.Millisecond) // the lapsed leases lapse
		const ttl = 2 * time.Minute
		before := time.Now()
		res, err := b.RefreshLocks(ctx, refreshes(batched, ttl))
		after := time.Now()
		must(t, err, "RefreshLocks")
		if len(res) != len(batched) {
			t.Fatalf("RefreshLocks returned %d results for %d locks", len(res), len(batched))
		}
		for i, c := range batched {
			wantRefreshed(t, c, res[i].State, res[i].Err, ttl, before, after, true, "batch")
		}
		for _, c := range single {
			before := time.Now()
			st, err := s.RefreshLock(ctx, c.key, c.owner, ttl)
			wantRefreshed(t, c, st, err, ttl, before, time.Now(), false, "single op")
		}
		// What the batch left behind: its leases extended (never ending before the end
		// it reported), every other lock as it was.
		for i, c := range batched {
			st, err := s.InspectLock(ctx, c.key)
			switch {
			case c.held:
				must(t, err, "InspectLock "+c.what)
				if st.Owner != c.owner || st.Token != c.token || st.Expires.Before(res[i].State.Expires.Add(-skew)) {
					t.Fatalf("after the batch the lock %s is %+v; want owner %q token %d ending no earlier than %v",
						c.what, st, c.owner, c.token, res[i].State.Expires)
				}
			case c.other != "":
				must(t, err, "InspectLock "+c.what)
				if st.Owner != c.other || st.Token != c.token || st.Expires.After(time.Now().Add(time.Minute+skew)) {
					t.Fatalf("the batch disturbed the lock %s: %+v", c.what, st)
				}
			default:
				wantCode(t, err, dcsync.NotFound, "InspectLock of the lock "+c.what+" after the batch (a refresh creates nothing)")
			}
		}
		for _, cs := range [][]batchCase{batched, single} {
			for _, c := range cs {
				switch {
				case c.held:
					must(t, s.ReleaseLock(ctx, c.key, c.owner), "ReleaseLock")
				case c.other != "":
					must(t, s.ReleaseLock(ctx, c.key, c.other), "ReleaseLock")
				}
			}
		}
	})

	t.Run("InspectIsTheSingleOp", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		cs := batchLocks(t, ctx, s, h, unique(t))
		time.Sleep(1500 * time.Millisecond)
		keys := make([]dcsync.Key, len(cs))
		for i, c := range cs {
			keys[i] = c.key
		}
		res, err := b.InspectLocks(ctx, keys)
		must(t, err, "InspectLocks")
		if len(res) != len(cs) {
			t.Fatalf("InspectLocks returned %d results for %d locks", len(res), len(cs))
		}
		for i, c := range cs {
			st, err := s.InspectLock(ctx, c.key)
			if c.held || c.other != "" {
				must(t, res[i].Err, "InspectLocks: the lock "+c.what)
				must(t, err, "InspectLock: the lock "+c.what)
				owner := c.owner
				if c.other != "" {
					owner = c.other
				}
				got := res[i].State
				if got.Owner != owner || got.Token != c.token || st.Owner != owner || st.Token != c.token ||
					got.Expires.Sub(st.Expires).Abs() > skew {
					t.Fatalf("the lock %s: InspectLocks %+v, InspectLock %+v; want owner %q token %d", c.what, got, st, owner, c.token)
				}
				must(t, s.ReleaseLock(ctx, c.key, owner), "ReleaseLock")
				continue
			}
			wantCode(t, res[i].Err, dcsync.NotFound, "InspectLocks: the lock "+c.what)
			wantCode(t, err, dcsync.NotFound, "InspectLock: the lock "+c.what)
		}
		res, err = b.InspectLocks(ctx, nil)
		must(t, err, "InspectLocks of no lock")
		if len(res) != 0 {
			t.Fatalf("InspectLocks of no lock returned %d results", len(res))
		}
	})

	// A batch with one invalid request fails as a whole, with InvalidArgument, before
	// it writes anything: the valid lease in it is not extended.
	t.Run("ValidationFailsTheBatch", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		k := dcsync.Key{Level: dcsync.DC, Client: client, Farm: h.Farm, Name: unique(t)}
		_, err := s.AcquireLock(ctx, k, "me", time.Minute)
		must(t, err, "AcquireLock")
		bad := []struct {
			what string
			req  driver.LockRefresh
		}{
			{"an empty owner", driver.LockRefresh{Key: k, TTL: 10 * time.Minute}},
			{"a zero TTL", driver.LockRefresh{Key: k, Owner: "me"}},
			{"a negative TTL", driver.LockRefresh{Key: k, Owner: "me", TTL: -time.Second}},
			{"an empty name", driver.LockRefresh{Key: dcsync.Key{Level: dcsync.DC, Client: client, Farm: h.Farm}, Owner: "me", TTL: 10 * time.Minute}},
			{"a bad level", driver.LockRefresh{Key: dcsync.Key{Level: dcsync.Level(9), Client: client, Farm: h.Farm, Name: k.Name}, Owner: "me", TTL: 10 * time.Minute}},
		}
		for _, c := range bad {
			for _, order := range []string{"first", "last"} {
				reqs := []driver.LockRefresh{c.req, {Key: k, Owner: "me", TTL: 10 * time.Minute}}
				if order == "last" {
					reqs[0], reqs[1] = reqs[1], reqs[0]
				}
				res, err := b.RefreshLocks(ctx, reqs)
				wantCode(t, err, dcsync.InvalidArgument, "RefreshLocks with "+c.what+" "+order)
				if res != nil {
					t.Fatalf("RefreshLocks with %s returned results %+v beside its error", c.what, res)
				}
			}
		}
		st, err := s.InspectLock(ctx, k)
		must(t, err, "InspectLock")
		if st.Owner != "me" || st.Expires.After(time.Now().Add(time.Minute+skew)) {
			t.Fatalf("a batch that failed validation extended the valid lease in it: %+v", st)
		}
		_, err = b.InspectLocks(ctx, []dcsync.Key{k, {Level: dcsync.DC, Client: client, Farm: h.Farm}})
		wantCode(t, err, dcsync.InvalidArgument, "InspectLocks with an empty name")
		must(t, s.ReleaseLock(ctx, k, "me"), "ReleaseLock")
	})

	// Batch and single refreshes of one lease, in turn: after each, the lease ends no
	// earlier than every end a refresh of it reported (the guarantee that a write landing
	// late must keep too: the stores' own fault-proxy tests deliver tries late).
	t.Run("NeverEndsBeforeAReportedEnd", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		k := dcsync.Key{Level: dcsync.DC, Client: client, Farm: h.Farm, Name: unique(t)}
		_, err := s.AcquireLock(ctx, k, "me", time.Minute)
		must(t, err, "AcquireLock")
		var latest time.Time
		check := func(what string, st driver.LockState) {
			t.Helper()
			if st.Expires.After(latest) {
				latest = st.Expires
			}
			got, err := s.InspectLock(ctx, k)
			must(t, err, "InspectLock after "+what)
			if got.Owner != "me" || got.Expires.Before(latest.Add(-skew)) {
				t.Fatalf("after %s the lease is %+v, ending before %v, the latest end a refresh reported", what, got, latest)
			}
		}
		for i := range 3 {
			res, err := b.RefreshLocks(ctx, []driver.LockRefresh{{Key: k, Owner: "me", TTL: 2 * time.Minute}})
			must(t, err, "RefreshLocks")
			must(t, res[0].Err, "RefreshLocks' result")
			check(fmt.Sprintf("batch refresh %d", i), res[0].State)
			st, err := s.RefreshLock(ctx, k, "me", 2*time.Minute)
			must(t, err, "RefreshLock")
			check(fmt.Sprintf("single refresh %d", i), st)
		}
		must(t, s.ReleaseLock(ctx, k, "me"), "ReleaseLock")
		res, err := b.RefreshLocks(ctx, nil)
		must(t, err, "RefreshLocks of no lock")
		if len(res) != 0 {
			t.Fatalf("RefreshLocks of no lock returned %d results", len(res))
		}
	})
}
