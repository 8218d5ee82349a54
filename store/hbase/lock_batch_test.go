package hbase

import (
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// rpcs returns the RPCs the shared client sent since before, by method.
func rpcs(t *testing.T, before map[string]int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for m, n := range shared(t).Calls() {
		if d := n - before[m]; d != 0 {
			out[m] = d
		}
	}
	return out
}

// TestLockBatch (real HBase, one region server): RefreshLocks of N locks this store
// holds is one MultiMutate, one Multi RPC; a lock lost in the middle of the batch (its
// lease taken over by another owner) gets LockLost and its new holder's lock is left
// untouched, the others are refreshed; a lock the store does not remember (acquired
// through another store) is refreshed by RefreshLock alone. InspectLocks of N keys is
// one Multi RPC and returns exactly what InspectLock returns for each, free keys
// included.
func TestLockBatch(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	other := openStore(t)
	defer other.Close()
	cnt := countCalls(s)
	ctx := ctxT(t, 2*time.Minute)
	const n = 40
	keys := make([]dcsync.Key, n)
	reqs := make([]driver.LockRefresh, n)
	acquired := make([]driver.LockState, n)
	for i := range keys {
		keys[i] = key(dcsync.DC, "dc1")
		owner := fmt.Sprint("o", i)
		st, err := s.AcquireLock(ctx, keys[i], owner, 20*time.Second)
		must(t, err, "acquire")
		acquired[i] = st
		reqs[i] = driver.LockRefresh{Key: keys[i], Owner: owner, TTL: time.Minute}
	}

	cnt.take()
	before := shared(t).Calls()
	res, err := s.RefreshLocks(ctx, reqs)
	must(t, err, "RefreshLocks")
	if got, calls := rpcs(t, before), cnt.take(); calls["MultiMutate"] != 1 || sumCalls(calls) != 1 || got["Multi"] != 1 || len(got) != 1 {
		t.Errorf("RefreshLocks of %d locks: store calls %v, RPCs %v; want one MultiMutate, one Multi RPC", n, calls, got)
	}
	for i, r := range res {
		if r.Err != nil || r.State.Owner != reqs[i].Owner || r.State.Token != acquired[i].Token || r.State.Expires.Before(acquired[i].Expires.Add(30*time.Second)) {
			t.Fatalf("refresh %d: %+v, acquired %+v", i, r, acquired[i])
		}
		in, err := s.InspectLock(ctx, keys[i])
		must(t, err, "inspect")
		if in.Expires.UnixMilli() != r.State.Expires.UnixMilli() || in.Token != acquired[i].Token {
			t.Fatalf("lock %d after the batch: %+v, refresh reported %+v", i, in, r.State)
		}
	}

	// Lock 17 is lost to a thief; lock 23 is released and taken again by its owner
	// through the other store: this store's memory of it is out of date (another
	// acquisition, another token), its batched write is not applied, and RefreshLock
	// refreshes it alone.
	const lostAt, aloneAt = 17, 23
	must(t, other.ReleaseLock(ctx, keys[lostAt], reqs[lostAt].Owner), "the other store frees lock 17")
	thief, err := other.AcquireLock(ctx, keys[lostAt], "thief", time.Minute)
	must(t, err, "thief")
	must(t, other.ReleaseLock(ctx, keys[aloneAt], reqs[aloneAt].Owner), "the other store frees lock 23")
	again, err := other.AcquireLock(ctx, keys[aloneAt], reqs[aloneAt].Owner, 20*time.Second)
	must(t, err, "lock 23 again")
	res, err = s.RefreshLocks(ctx, reqs)
	must(t, err, "RefreshLocks with a lost lock")
	for i, r := range res {
		switch i {
		case lostAt:
			if dcsync.CodeOf(r.Err) != dcsync.LockLost {
				t.Fatalf("refresh of the lost lock: %+v, want LockLost", r)
			}
		case aloneAt:
			if r.Err != nil || r.State.Token != again.Token {
				t.Fatalf("refresh of the lock no store remembers: %+v, taken %+v", r, again)
			}
		default:
			if r.Err != nil {
				t.Fatalf("refresh %d: %v", i, r.Err)
			}
		}
	}
	in, err := s.InspectLock(ctx, keys[lostAt])
	must(t, err, "inspect the lost lock")
	if in.Owner != "thief" || in.Token != thief.Token || in.Expires.UnixMilli() != thief.Expires.UnixMilli() {
		t.Fatalf("the thief's lock after the batch: %+v, taken %+v", in, thief)
	}

	// InspectLocks: every key, plus free ones, against InspectLock.
	all := append(append([]dcsync.Key{}, keys...), key(dcsync.DC, "dc1"), key(dcsync.XDC, "dc1"))
	cnt.take()
	before = shared(t).Calls()
	ins, err := s.InspectLocks(ctx, all)
	must(t, err, "InspectLocks")
	if got, calls := rpcs(t, before), cnt.take(); calls["MultiGet"] != 1 || sumCalls(calls) != 1 || got["Multi"] != 1 || len(got) != 1 {
		t.Errorf("InspectLocks of %d locks: store calls %v, RPCs %v; want one MultiGet, one Multi RPC", len(all), calls, got)
	}
	for i, k := range all {
		st, err := s.InspectLock(ctx, k)
		if ins[i].State != st || dcsync.CodeOf(ins[i].Err) != dcsync.CodeOf(err) {
			t.Fatalf("key %d: InspectLocks %+v, InspectLock %+v, %v", i, ins[i], st, err)
		}
	}
	for i, q := range reqs {
		if i != lostAt {
			must(t, s.ReleaseLock(ctx, q.Key, q.Owner), "release")
		}
	}
	must(t, other.ReleaseLock(ctx, keys[lostAt], "thief"), "release the thief's")
}
