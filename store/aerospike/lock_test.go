package aerospike_test

import (
	"testing"
	"time"

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
