package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/semaphore"
	"github.com/dcsync/dcsync/store/memory"
)

// moves counts the single acquisitions that reach a memory store and its batched
// takes and releases (driver.LockMover), next to singles' counts.
type moves struct {
	*singles
	acquires, takes, releases atomic.Int64
	taken                     []driver.LockAcquire // the batched takes' requests
}

func (s *moves) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	s.acquires.Add(1)
	return s.singles.AcquireLock(ctx, k, owner, ttl)
}

func (s *moves) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	s.takes.Add(1)
	s.taken = append(s.taken, reqs...)
	return s.singles.Store.AcquireLocks(ctx, reqs)
}

func (s *moves) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	s.releases.Add(1)
	return s.singles.Store.ReleaseLocks(ctx, reqs)
}

// semaphore run's store (the lease clock over the store) keeps the store's batched
// calls: n permits are taken in one batched call and released in one, each taken or
// renewed lease moves the clock, and the permits' renewals can go in one call
// (driver.LockBatcher: the semaphore's lock.Manager batches KeepAlive renewals only
// on a store that has it). Before, the wrapper hid them: a permit per call.
func TestSemaphoreRunStoreKeepsBatches(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	defer mem.Close()
	s := &moves{singles: &singles{Store: mem}}
	lc := newLeaseClock(s)
	ps := permitStore{Store: s, lc: lc}
	m, err := semaphore.New(ps, "app", "dc1", semaphore.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sem, err := m.Open(ctx, "pool", 8)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.acquires.Load(); n != 0 || s.takes.Load() != 1 {
		t.Errorf("5 permits taken with %d single AcquireLock calls and %d batched; want 0 and 1", n, s.takes.Load())
	}
	end := lc.End()
	if end.IsZero() {
		t.Fatal("the batched take left the lease clock without an end")
	}
	if _, ok := any(ps).(driver.LockBatcher); !ok {
		t.Fatal("semaphore run's store is no driver.LockBatcher: its permits renew one call each")
	}
	reqs := make([]driver.LockRefresh, 0, 5)
	for _, a := range s.taken {
		reqs = append(reqs, driver.LockRefresh{Key: a.Key, Owner: a.Owner, TTL: time.Minute})
	}
	if len(reqs) != 5 {
		t.Fatalf("%d slot locks taken in batches; want 5", len(reqs))
	}
	time.Sleep(10 * time.Millisecond) // a later send time: the clock's end moves
	res, err := driver.RefreshLocks(ctx, ps, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("batched renewal: %v", r.Err)
		}
	}
	if n := s.refreshes.Load(); n != 0 {
		t.Errorf("the renewal of 5 permits made %d single RefreshLock calls; want one batched call", n)
	}
	if !lc.End().After(end) {
		t.Fatalf("a batched renewal did not move the lease clock's end (%v, before %v)", lc.End(), end)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if s.releases.Load() != 1 {
		t.Errorf("5 permits released in %d batched calls; want 1", s.releases.Load())
	}
	if !lc.End().IsZero() {
		t.Errorf("the lease clock still has an end (%v) after every permit was released", lc.End())
	}
}

// cutReleases fails every release with a Connection error before it reaches the store:
// the release's outcome is unknown, as when its reply is lost.
type cutReleases struct{ *memory.Store }

func (s cutReleases) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	return driver.Errorf(dcsync.Connection, "test.Release", "cut")
}

func (s cutReleases) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	return nil, driver.Errorf(dcsync.Connection, "test.Release", "cut")
}

// A lease given up leaves the clock even when its release fails (single or batched):
// the run no longer relies on it and KeepAlive no longer renews it, so keeping its end
// would stop the command when that lease ends, with the leases it does hold still
// renewed (semaphore run gives back a partial take before it retries).
func TestLeaseClockForgetsAGivenUpLease(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	defer mem.Close()
	lc := newLeaseClock(cutReleases{mem})
	short := dcsync.Key{Level: dcsync.DC, Client: "app", Farm: "dc1", Name: "short"}
	long := dcsync.Key{Level: dcsync.DC, Client: "app", Farm: "dc1", Name: "long"}
	if _, err := lc.AcquireLock(ctx, long, "me", time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, release := range []func() error{
		func() error { return lc.ReleaseLock(ctx, short, "me") },
		func() error {
			_, err := lc.ReleaseLocks(ctx, []driver.LockRelease{{Key: short, Owner: "me"}})
			return err
		},
	} {
		if _, err := lc.AcquireLock(ctx, short, "me", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := release(); err == nil {
			t.Fatal("the cut release succeeded")
		}
		if !lc.End().After(time.Now().Add(30 * time.Minute)) {
			t.Errorf("End %v after short was given up: want long's (an hour)", lc.End())
		}
		mem.ReleaseLock(ctx, short, "me")
	}
}
