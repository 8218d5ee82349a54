package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// These tests run on the real clock, with the shortest lease (1 s) and sleeps well away
// from its edges; handle_test.go pins the same behaviour on a fake clock.

// blocker is a store whose RefreshLock, once armed, blocks without looking at its
// context until unblocked, as SQLite's busy wait did.
type blocker struct {
	dcsync.Store
	mu      sync.Mutex
	armed   bool
	inCall  bool
	unblock chan struct{}
}

func (b *blocker) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (dcsync.LockState, error) {
	b.mu.Lock()
	armed := b.armed
	b.inCall = armed
	b.mu.Unlock()
	if armed {
		<-b.unblock
		b.mu.Lock()
		b.inCall = false
		b.mu.Unlock()
		return dcsync.LockState{}, dcsync.Errorf(dcsync.Connection, "test", "blocked call gave up")
	}
	return b.Store.RefreshLock(ctx, k, owner, ttl)
}

func (b *blocker) blocked() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inCall
}

// Issue 8 §1 repro: a KeepAlive started after 2/3 of the lease renewed only TTL/3 later,
// after the lease had ended, and another process took the lock while the first one's
// keep-alive context was still live.
func TestKeepAliveStartedLateKeepsTheLock(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	a, _ := lock.New(store, "billing", "dc1")
	b, _ := lock.New(store, "billing", "dc1")
	l, err := a.TryAcquire(ctx, "job", lock.TTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	kctx := l.KeepAlive(ctx)
	time.Sleep(600 * time.Millisecond) // 1.3 s: past the first lease
	if kctx.Err() != nil {
		t.Fatalf("keep-alive context ended: %v", context.Cause(kctx))
	}
	if l2, err := b.TryAcquire(ctx, "job"); err == nil {
		t.Fatalf("B acquired token %d while A's keep-alive context for token %d was live", l2.Token(), l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A renewal blocked in the store must not keep the keep-alive context live past the
// lease: the loss is declared while the call is still blocked.
func TestKeepAliveLossWhileRefreshBlocked(t *testing.T) {
	ctx := context.Background()
	store := &blocker{Store: memory.New(), unblock: make(chan struct{})}
	m, _ := lock.New(store, "billing", "dc1")
	l, err := m.TryAcquire(ctx, "job", lock.TTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.armed = true
	store.mu.Unlock()
	kctx := l.KeepAlive(ctx)
	var once sync.Once
	unblock := func() { once.Do(func() { close(store.unblock) }) }
	failsafe := time.AfterFunc(5*time.Second, unblock) // a lease of 1 s is long over by then
	defer failsafe.Stop()
	<-kctx.Done()
	blocked := store.blocked()
	unblock()
	if !blocked {
		t.Fatal("the loss was declared only after the blocked renewal returned")
	}
	if !errors.Is(context.Cause(kctx), dcsync.ErrLockLost) {
		t.Fatalf("cause %v, want LockLost", context.Cause(kctx))
	}
	_ = l.Release(ctx)
}

// Issue 8 §1: a second KeepAlive returned an already-cancelled context whose cause was
// not a dcsync error.
func TestSecondKeepAliveReturnsTheRunningContext(t *testing.T) {
	ctx := context.Background()
	m, _ := lock.New(memory.New(), "billing", "dc1")
	l, err := m.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	k1 := l.KeepAlive(ctx)
	k2 := l.KeepAlive(ctx)
	if k2.Err() != nil {
		t.Fatalf("second KeepAlive: context ended, cause %v", context.Cause(k2))
	}
	if k1 != k2 {
		t.Fatal("second KeepAlive returned another context")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	after := l.KeepAlive(ctx)
	var de *dcsync.Error
	if after.Err() == nil || !errors.As(context.Cause(after), &de) || de.Code != dcsync.LockLost {
		t.Fatalf("KeepAlive after Release: cause %v, want a *dcsync.Error with code LockLost", context.Cause(after))
	}
}

// Issue 8 §6: Acquire with a cancelled ctx on a FREE lock said it was held, and printed
// the cause twice.
func TestAcquireCancelledOnAFreeLock(t *testing.T) {
	m, _ := lock.New(memory.New(), "billing", "dc1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := m.Acquire(ctx, "job")
	if dcsync.CodeOf(err) != dcsync.LockUnavailable || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled ctx: %v; want LockUnavailable matching context.Canceled", err)
	}
	if msg := err.Error(); strings.Contains(msg, "is held") || strings.Count(msg, "context canceled") != 1 {
		t.Fatalf("Acquire with a cancelled ctx on a free lock: %q; want no 'is held' and the cause once", msg)
	}
	// When it was held, it says so.
	if _, err := m.TryAcquire(context.Background(), "job"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer wcancel()
	_, err = m.Acquire(wctx, "job")
	if msg := err.Error(); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(msg, "is held") || strings.Count(msg, "deadline exceeded") != 1 {
		t.Fatalf("Acquire of a held lock until ctx ends: %q", msg)
	}
}
