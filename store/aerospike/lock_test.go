package aerospike_test

import (
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/layout"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestLockFenceIsPerIdentity: client "a#b" with lock "c" and client "a" with lock "b#c"
// share one lock record in the Java layout (so they exclude each other, as Java clients
// would), but each has its own fence record, keyed by layout.IdentityKey: the second
// lock's tokens start at 1.
func TestLockFenceIsPerIdentity(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	u := unique("c")
	k1 := dcsync.Key{Level: dcsync.DC, Client: "a#b", Farm: "dc1", Name: u}
	k2 := dcsync.Key{Level: dcsync.DC, Client: "a", Farm: "dc1", Name: "b#" + u}
	for want := uint64(1); want <= 3; want++ {
		st, err := s.AcquireLock(ctx, k1, "owner-1", time.Minute)
		must(t, err, "acquire a#b/"+u)
		if st.Token != want {
			t.Fatalf("token %d, want %d", st.Token, want)
		}
		if want == 3 {
			_, err := s.AcquireLock(ctx, k2, "owner-2", time.Minute)
			wantCode(t, err, dcsync.LockUnavailable, "acquire of the colliding lock while the first is held")
		}
		must(t, s.ReleaseLock(ctx, k1, "owner-1"), "release")
	}
	st, err := s.AcquireLock(ctx, k2, "owner-2", time.Minute)
	must(t, err, "acquire a/b#"+u)
	if st.Token != 1 {
		t.Fatalf("the colliding lock's first token = %d, want 1 (its own fence)", st.Token)
	}
	must(t, s.ReleaseLock(ctx, k2, "owner-2"), "release")
	for k, want := range map[dcsync.Key]int{k1: 3, k2: 1} {
		rec, err := c.Get(nil, key(t, "F#"+dc1Locks, layout.IdentityKey(k)))
		must(t, err, "raw get of the fence record of "+k.String())
		if rec.Bins[aerospike.FenceBin] != want {
			t.Fatalf("fence of %s = %v, want %d", k, rec.Bins, want)
		}
	}
}

// TestLockWithTokenBin: a lock record as versions before issue 15 wrote it (its token in
// TokenBin, no acquisition id, the fence counter only) keeps working: it reads with
// its token, refreshes and releases, and the next acquisition's token is above it.
func TestLockWithTokenBin(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	k := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: unique("old")}
	wp := as.NewWritePolicy(0, 61)
	must(t, c.Put(wp, key(t, dc1Locks, client+"#"+k.Name), as.BinMap{
		"dc1##data": 1, "dc1##uat": time.Now().UnixMilli(), aerospike.OwnerBin: "old-owner",
		aerospike.LeaseBin: 60000, aerospike.IdentityBin: layout.IdentityKey(k), aerospike.TokenBin: 7,
	}), "raw put of an old lock record")
	must(t, c.Put(as.NewWritePolicy(0, as.TTLDontExpire), key(t, "F#"+dc1Locks, layout.IdentityKey(k)),
		as.BinMap{aerospike.FenceBin: 7}), "raw put of an old fence record")
	st, err := s.InspectLock(ctx, k)
	if err != nil || st.Owner != "old-owner" || st.Token != 7 {
		t.Fatalf("InspectLock of an old record = %+v, %v; want old-owner, token 7", st, err)
	}
	res, err := s.InspectLocks(ctx, []dcsync.Key{k})
	if err != nil || res[0].Err != nil || res[0].State.Token != 7 {
		t.Fatalf("InspectLocks of an old record = %+v, %v", res, err)
	}
	st, err = s.RefreshLock(ctx, k, "old-owner", 2*time.Minute)
	if err != nil || st.Token != 7 {
		t.Fatalf("RefreshLock of an old record = %+v, %v; want token 7", st, err)
	}
	_, err = s.AcquireLock(ctx, k, "new-owner", time.Minute)
	wantCode(t, err, dcsync.LockUnavailable, "acquire over an old holder")
	must(t, s.ReleaseLock(ctx, k, "old-owner"), "release of an old record")
	st, err = s.AcquireLock(ctx, k, "new-owner", time.Minute)
	if err != nil || st.Token != 8 {
		t.Fatalf("acquire after the old holder = %+v, %v; want token 8", st, err)
	}
	got, err := s.InspectLock(ctx, k)
	if err != nil || got.Token != 8 || got.Owner != "new-owner" {
		t.Fatalf("InspectLock = %+v, %v; want new-owner, token 8", got, err)
	}
	must(t, s.ReleaseLock(ctx, k, "new-owner"), "release")
}
