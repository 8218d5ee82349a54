package hbase

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// heldOps wraps the real client and holds back the next CheckAndMutate it is told to:
// the call is not sent, the caller sees an outcome unknown (and retries), and deliver
// sends it later, after whatever the caller did meanwhile: a first try that reaches
// the region server late (docs/stores/hbase.md, "Writes that land late").
type heldOps struct {
	ops
	mu    sync.Mutex
	armed int
	held  []func(context.Context) (bool, error)
}

func (l *heldOps) hold(n int) {
	l.mu.Lock()
	l.armed = n
	l.mu.Unlock()
}

func (l *heldOps) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	l.mu.Lock()
	if l.armed > 0 {
		l.armed--
		l.held = append(l.held, func(ctx context.Context) (bool, error) {
			ok, _, err := l.ops.CheckAndMutate(ctx, table, row, cond, muts...)
			return ok, err
		})
		l.mu.Unlock()
		// Let the clock move on, so that the retry's expiry differs from this one's.
		time.Sleep(5 * time.Millisecond)
		return false, nil, errUnknown()
	}
	l.mu.Unlock()
	return l.ops.CheckAndMutate(ctx, table, row, cond, muts...)
}

// deliver sends the held calls and returns whether each was applied.
func (l *heldOps) deliver(t *testing.T) []bool {
	t.Helper()
	l.mu.Lock()
	held := l.held
	l.held = nil
	l.mu.Unlock()
	var out []bool
	for _, call := range held {
		ok, err := call(ctxT(t, time.Minute))
		must(t, err, "late delivery")
		out = append(out, ok)
	}
	return out
}

func heldLockStore(t *testing.T) (*Store, *heldOps) {
	s := openStore(t)
	t.Cleanup(func() { s.Close() })
	l := &heldOps{ops: s.db}
	s.db = l
	return s, l
}

// TestLockLateRefresh: the first try of a 20 s refresh is held back (outcome unknown);
// its resend lands, then a 2 minute refresh; the held try is delivered last.
// Conditioned on the owner alone it was applied and set the recorded expiry (and the
// cells' TTL) back to 20 s from the first refresh, so the lease ended some 100 s
// before the deadline the second refresh reported: two holders. Conditioned on the
// expiry it replaces, it is not applied.
func TestLockLateRefresh(t *testing.T) {
	s, l := heldLockStore(t)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	_, err := s.AcquireLock(ctx, k, "me", 10*time.Second)
	must(t, err, "acquire")
	l.hold(1)
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

// TestLockLateTokenWrite: the first try of an acquire's token write (step 3, which puts
// T with the acquire's TTL) is held back; its resend lands and the holder refreshes its
// lease to 2 minutes; the held try is delivered last. Conditioned on the owner alone it
// was applied, rewriting T with the acquire's 20 s TTL under the refreshed lease;
// conditioned on the expiry step 1 recorded, it is not applied.
func TestLockLateTokenWrite(t *testing.T) {
	s, l := heldLockStore(t)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	l.hold(1) // step 1 is a CheckAndMutateRead: the first CheckAndMutate is step 3
	st, err := s.AcquireLock(ctx, k, "me", 20*time.Second)
	must(t, err, "acquire whose token write was held back")
	ref, err := s.RefreshLock(ctx, k, "me", 2*time.Minute)
	must(t, err, "refresh")
	applied := l.deliver(t)
	if len(applied) != 1 || applied[0] {
		t.Errorf("the late token write was applied: %v", applied)
	}
	in, err := s.InspectLock(ctx, k)
	must(t, err, "inspect")
	if in.Owner != "me" || in.Token != st.Token || in.Expires.UnixMilli() < ref.Expires.UnixMilli() {
		t.Fatalf("after the late token write the lock is %+v; acquired %+v, refreshed %+v", in, st, ref)
	}
	must(t, s.ReleaseLock(ctx, k, "me"), "release")
}
