package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// These tests run on the real clock; handle_test.go and deadline_test.go pin the same
// behaviour on a fake clock. What they assert holds whatever the timing: a loaded
// machine may make a lease run out before its renewal, and then they check what still
// holds (no second holder while this one's lease runs by its own rule).

// blocker is a store whose RefreshLock, once armed, blocks without looking at its
// context until unblocked, as SQLite's busy wait did.
type blocker struct {
	driver.Store
	mu      sync.Mutex
	armed   bool
	inCall  bool
	unblock chan struct{}
}

func (b *blocker) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	b.mu.Lock()
	armed := b.armed
	b.inCall = armed
	b.mu.Unlock()
	if armed {
		<-b.unblock
		b.mu.Lock()
		b.inCall = false
		b.mu.Unlock()
		return driver.LockState{}, driver.Errorf(dcsync.Connection, "test", "blocked call gave up")
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
// keep-alive context was still live. The check is the lock's own rule, which needs no
// timer to have fired: while Held says the lease runs, nobody else acquires it. When
// the machine was too slow to renew in time (Held false, the context ends LockLost),
// another acquirer may take it; the deterministic version is
// TestKeepAliveStartedLateRenewsAtOnce.
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
	l2, err := b.TryAcquire(ctx, "job")
	held := l.Held() // read after B's try returned: if B took it, A's lease was over before
	if err == nil {
		if held {
			t.Fatalf("B acquired token %d while A's lease (token %d) still ran by A's own rule", l2.Token(), l.Token())
		}
		<-kctx.Done()
		if !errors.Is(context.Cause(kctx), dcsync.ErrLockLost) {
			t.Fatalf("A's lease ran out, but its keep-alive context ended with %v", context.Cause(kctx))
		}
		t.Logf("this machine did not renew a 1 s lease in time (B took it after A's lease ended): only the rule was checked")
		_ = l2.Release(ctx)
		_ = l.Release(ctx)
		return
	}
	if err := l.Release(ctx); err != nil && held {
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
	// Only so that a broken KeepAlive cannot hang the test: the loss must be declared
	// while the call is blocked, however late the watchdog fires on a loaded machine.
	failsafe := time.AfterFunc(time.Minute, unblock)
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
	// Long enough for the first try to see the lock held on a loaded machine (a ctx
	// that ends before the first try says nothing about the holder).
	wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
	defer wcancel()
	_, err = m.Acquire(wctx, "job")
	if msg := err.Error(); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(msg, "is held") || strings.Count(msg, "deadline exceeded") != 1 {
		t.Fatalf("Acquire of a held lock until ctx ends: %q", msg)
	}
}
