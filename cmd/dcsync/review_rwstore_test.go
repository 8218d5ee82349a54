package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/store/memory"
)

// singles counts the one-lock inspections and renewals that reach a memory store, and
// its batched ones.
type singles struct {
	*memory.Store
	inspects, refreshes, batches atomic.Int64
}

func (s *singles) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	s.inspects.Add(1)
	return s.Store.InspectLock(ctx, k)
}

func (s *singles) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	s.refreshes.Add(1)
	return s.Store.RefreshLock(ctx, k, owner, ttl)
}

func (s *singles) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	s.batches.Add(1)
	return s.Store.InspectLocks(ctx, keys)
}

func (s *singles) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	s.batches.Add(1)
	return s.Store.RefreshLocks(ctx, reqs)
}

// rwlock run's store (the lease clock over the store) keeps the store's batched
// inspection: a writer's wait for the readers reads the M slots in one call per poll,
// not M calls; renewals in one call go through the lease clock too (its end moves).
func TestReviewRWStoreKeepsBatches(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	defer mem.Close()
	s := &singles{Store: mem}
	lc := newLeaseClock(s)
	m, err := rwlock.New(rwStore{leaseClock: lc, RegisterStore: mem}, "app", "dc1", rwlock.WithTTL(time.Minute), rwlock.WithReaders(64))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.AcquireWrite(ctx, "batched", rwlock.Wait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	if n := s.inspects.Load(); n != 0 {
		t.Errorf("the writer's read of 64 reader slots made %d single InspectLock calls (%d batched), want 1 batched call", n, s.batches.Load())
	}
	end := lc.End()
	b, ok := any(rwStore{leaseClock: lc, RegisterStore: mem}).(driver.LockBatcher)
	if !ok {
		t.Fatal("rwlock run's store is no driver.LockBatcher")
	}
	time.Sleep(10 * time.Millisecond) // a later send time: the clock's end moves
	res, err := b.RefreshLocks(ctx, []driver.LockRefresh{{Key: w.Key(), Owner: w.Owner(), TTL: time.Minute}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("batched renewal: %v %v", err, res)
	}
	if !lc.End().After(end) {
		t.Fatalf("a batched renewal did not move the lease clock's end (%v, before %v)", lc.End(), end)
	}
}
