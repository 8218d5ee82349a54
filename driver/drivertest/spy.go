package drivertest

import (
	"context"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// spy wraps a store: it counts the calls that reach it, records the largest batch read,
// and can make RefreshLock fail.
type spy struct {
	driver.Store

	mu         sync.Mutex
	calls      int
	batch      int
	refreshErr error
}

func newSpy(s driver.Store) *spy { return &spy{Store: s} }

func (s *spy) count() {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
}

func (s *spy) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *spy) maxBatch() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batch
}

func (s *spy) failRefresh(err error) {
	s.mu.Lock()
	s.refreshErr = err
	s.mu.Unlock()
}

func (s *spy) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	s.count()
	return s.Store.AcquireLock(ctx, k, owner, ttl)
}

func (s *spy) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	s.count()
	s.mu.Lock()
	err := s.refreshErr
	s.mu.Unlock()
	if err != nil {
		return driver.LockState{}, err
	}
	return s.Store.RefreshLock(ctx, k, owner, ttl)
}

func (s *spy) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	s.count()
	return s.Store.ReleaseLock(ctx, k, owner)
}

func (s *spy) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	s.count()
	return s.Store.InspectLock(ctx, k)
}

func (s *spy) CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error {
	s.count()
	return s.Store.CreateLatch(ctx, k, count, ttl)
}

func (s *spy) EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (bool, error) {
	s.count()
	return s.Store.EnsureLatch(ctx, k, ttl)
}

func (s *spy) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	s.count()
	return s.Store.AddLatch(ctx, k, delta)
}

func (s *spy) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	s.count()
	s.mu.Lock()
	s.batch = max(s.batch, len(keys))
	s.mu.Unlock()
	return s.Store.ReadLatches(ctx, keys)
}
