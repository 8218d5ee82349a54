package aerospike_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestLockLateTakeAfterRelease: the first try of A's take (the gen-0 put of the lock
// record, acquisition id a) is held back; its retry lands, A gets number 1, releases; B
// acquires (number 2) and releases; then A's held first try is delivered. The record is
// absent, so the gen-0 put creates it: a holding of owner A with acquisition id a, which
// the fence record still maps to number 1. Readers (InspectLock, A's RefreshLock) must
// not report it held with token 1 after token 2 was issued: a token seen never goes
// back. A reader shows a number only when it is the fence's latest, so the late record
// reads token 0 (unknown), as a record without a number did before issue 15.
func TestLockLateTakeAfterRelease(t *testing.T) {
	proxy := startProxy(t)
	s := newStore(t, dial(t, proxy.Addr()), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond})
	direct := newStore(t, realClient(t), aerospike.Config{})
	ctx := ctxT(t)
	k := dcsync.Key{Level: dcsync.DC, Client: "late", Farm: "dc1", Name: unique("ghost")}
	proxy.HoldRequests(1, writesTo(dc1Locks))
	a, err := s.AcquireLock(ctx, k, "a", 20*time.Second)
	must(t, err, "A's acquire whose first take try was held back")
	if proxy.Held() != 1 {
		t.Fatalf("held %d requests, want 1", proxy.Held())
	}
	must(t, s.ReleaseLock(ctx, k, "a"), "A's release")
	b, err := direct.AcquireLock(ctx, k, "b", 20*time.Second)
	must(t, err, "B's acquire")
	must(t, direct.ReleaseLock(ctx, k, "b"), "B's release")
	if b.Token <= a.Token {
		t.Fatalf("B's token %d not above A's %d", b.Token, a.Token)
	}
	proxy.ClearDrops()
	codes, err := proxy.Deliver()
	must(t, err, "deliver")
	t.Logf("A's held take was answered with result codes %v (0: applied)", codes)
	got, err := direct.InspectLock(ctx, k)
	var de *dcsync.Error
	if errors.As(err, &de) && de.Code == dcsync.NotFound {
		return // the late take changed nothing
	}
	must(t, err, "inspect")
	t.Logf("after the late take the lock reads %+v", got)
	if got.Token != 0 && got.Token <= b.Token {
		t.Errorf("a late take of A (released) shows the lock held by %q with token %d, after token %d was issued to B", got.Owner, got.Token, b.Token)
	}
	if st, err := s.RefreshLock(ctx, k, "a", 20*time.Second); err == nil && st.Token != 0 && st.Token <= b.Token {
		t.Errorf("A's RefreshLock after its release succeeds with token %d, after token %d was issued to B", st.Token, b.Token)
	}
	_ = direct.ReleaseLock(ctx, k, "a")
}
