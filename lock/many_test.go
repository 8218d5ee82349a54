package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// moveCounter is the memory store, counting its single and batched acquires and
// releases.
type moveCounter struct {
	*memory.Store
	acquire, acquires, release, releases atomic.Int64
}

func (s *moveCounter) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	s.acquire.Add(1)
	return s.Store.AcquireLock(ctx, k, owner, ttl)
}

func (s *moveCounter) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	s.release.Add(1)
	return s.Store.ReleaseLock(ctx, k, owner)
}

func (s *moveCounter) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	s.acquires.Add(1)
	return s.Store.AcquireLocks(ctx, reqs)
}

func (s *moveCounter) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	s.releases.Add(1)
	return s.Store.ReleaseLocks(ctx, reqs)
}

// TryAcquireMany takes every free lock of its names in one store call, each with
// TryAcquire's outcome (a token above every earlier one of the lock; LockUnavailable
// for a lock held elsewhere, or named twice); ReleaseMany frees them in one call, each
// with Release's outcome (LockLost for one no longer held; InvalidArgument for a lock
// of another Manager, left held), and ends their KeepAlives.
func TestTryAcquireManyAndReleaseMany(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	s := &moveCounter{Store: base}
	m, err := lock.New(s, "c", "f", lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	other, err := lock.New(s, "c", "f", lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	prev, err := m.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s.acquire.Store(0)
	s.release.Store(0)
	taken, err := m.TryAcquireMany(ctx, []string{"a", "b", "held", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if n, b := s.acquire.Load(), s.acquires.Load(); n != 0 || b != 1 {
		t.Fatalf("TryAcquireMany made %d single and %d batched acquires, want 0 and 1", n, b)
	}
	if taken[0].Err != nil || taken[1].Err != nil || taken[0].Lock.Token() <= prev.Token() {
		t.Fatalf("TryAcquireMany of free locks: %+v, %+v (the earlier token of a: %d)", taken[0], taken[1], prev.Token())
	}
	for _, i := range []int{2, 3} {
		if !errors.Is(taken[i].Err, dcsync.ErrLockUnavailable) || taken[i].Lock != nil {
			t.Fatalf("TryAcquireMany result %d (held elsewhere, or named twice): %+v, want LockUnavailable", i, taken[i])
		}
	}
	a, b := taken[0].Lock, taken[1].Lock
	kctx := a.KeepAlive(ctx)
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s.release.Store(0)
	errs := m.ReleaseMany(ctx, []*lock.Lock{a, b, held})
	if n, r := s.release.Load(), s.releases.Load(); n != 0 || r != 1 {
		t.Fatalf("ReleaseMany made %d single and %d batched releases, want 0 and 1", n, r)
	}
	if errs[0] != nil || !errors.Is(errs[1], dcsync.ErrLockLost) || dcsync.CodeOf(errs[2]) != dcsync.InvalidArgument {
		t.Fatalf("ReleaseMany: %v; want nil, LockLost (released before), InvalidArgument (another manager's)", errs)
	}
	if kctx.Err() == nil {
		t.Fatal("ReleaseMany did not end the KeepAlive of a lock it released")
	}
	if _, err := m.Inspect(ctx, "a"); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("a after ReleaseMany: %v, want NotFound", err)
	}
	if st, err := m.Inspect(ctx, "held"); err != nil || st.Owner != held.Owner() {
		t.Fatalf("the lock of another manager after ReleaseMany: %+v, %v; want it held", st, err)
	}
	if _, err := m.TryAcquireMany(ctx, []string{"x", ""}); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("TryAcquireMany with an empty name: %v, want InvalidArgument", err)
	}
	if _, err := m.Inspect(ctx, "x"); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("TryAcquireMany that failed validation took x: %v", err)
	}
}
