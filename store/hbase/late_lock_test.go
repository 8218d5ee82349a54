package hbase

import (
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// TestLockLateRefresh: the first try of a 20 s refresh is held back (outcome unknown);
// its resend lands, then a 2 minute refresh; the held try is delivered last.
// Conditioned on the owner alone it was applied and set the recorded expiry (and the
// cells' TTL) back to 20 s from the first refresh, so the lease ended some 100 s
// before the deadline the second refresh reported: two holders. Conditioned on the
// expiry it replaces, it is not applied.
func TestLockLateRefresh(t *testing.T) {
	s := openStore(t)
	l := holdWrites(t, s, false)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	_, err := s.AcquireLock(ctx, k, "me", 10*time.Second)
	must(t, err, "acquire")
	l.holdAfter(0, nil)
	_, err = s.RefreshLock(ctx, k, "me", 20*time.Second)
	must(t, err, "refresh whose first try was held back")
	ref, err := s.RefreshLock(ctx, k, "me", 2*time.Minute)
	must(t, err, "second refresh")
	applied := l.deliver(t)
	if len(applied) != 1 || applied[0] {
		t.Errorf("the late refresh was applied: %v", applied)
	}
	in, err := s.InspectLock(ctx, k)
	must(t, err, "inspect")
	if in.Owner != "me" || in.Expires.UnixMilli() < ref.Expires.UnixMilli() {
		t.Fatalf("after the late refresh the lock is %+v, ending %v before the deadline the second refresh reported",
			in, ref.Expires.Sub(in.Expires))
	}
	must(t, s.ReleaseLock(ctx, k, "me"), "release")
}

// TestLockLateTokenWrite: the first try of an acquire's second conditional write is
// held back: on a key of its own, the move of the row's fencing counter (the first
// acquire of a row whose counter an earlier version created below fenceBase: a new
// row's counter is created in the take itself, with no second write); on a key that
// shares its Java row with another, the token write
// (which puts T with the acquire's TTL). Its resend lands and the holder refreshes its
// lease to 2 minutes; the held try is delivered last. Conditioned on the owner alone
// the token write was applied, rewriting T with the acquire's 20 s TTL under the
// refreshed lease; conditioned on the expiry the take recorded, neither is applied.
func TestLockLateTokenWrite(t *testing.T) {
	for _, sharedRow := range []bool{false, true} {
		t.Run(map[bool]string{false: "own-row", true: "shared-row"}[sharedRow], func(t *testing.T) {
			s := openStore(t)
			l := holdWrites(t, s, false)
			ctx := ctxT(t, time.Minute)
			k := key(dcsync.DC, "dc1")
			if sharedRow {
				k.Client += "#x"
			} else {
				// A counter below fenceBase, as a take of an earlier version left it: the
				// take leaves it there and the counter is moved after it (moveFence).
				_, err := shared(t).Increment(ctx, fixture.lockTable, &hbaserpc.Increment{Row: layout.HBaseLockRow(k),
					Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: 3}}})
				must(t, err, "counter below fenceBase")
			}
			l.holdAfter(1, nil) // the first conditional write is the take: the second is held
			st, err := s.AcquireLock(ctx, k, "me", 20*time.Second)
			must(t, err, "acquire whose second write was held back")
			l.mu.Lock()
			held := len(l.held)
			l.mu.Unlock()
			if held != 1 {
				t.Fatalf("%d writes held by the acquire, want its second", held)
			}
			ref, err := s.RefreshLock(ctx, k, "me", 2*time.Minute)
			must(t, err, "refresh")
			applied := l.deliver(t)
			if len(applied) != 1 || applied[0] {
				t.Errorf("the late write was applied: %v", applied)
			}
			in, err := s.InspectLock(ctx, k)
			must(t, err, "inspect")
			if in.Owner != "me" || in.Token != st.Token || in.Expires.UnixMilli() < ref.Expires.UnixMilli() {
				t.Fatalf("after the late write the lock is %+v; acquired %+v, refreshed %+v", in, st, ref)
			}
			must(t, s.ReleaseLock(ctx, k, "me"), "release")
		})
	}
}
