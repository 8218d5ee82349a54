package memory

import (
	"context"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var (
	_ driver.LockBatcher = (*Store)(nil)
	_ driver.LockMover   = (*Store)(nil)
)

// lockBatch runs op on every request of reqs under one hold of the store's mutex, in
// order, at one instant (now), after check has passed for every request: any invalid
// request fails the whole batch before anything changes.
func lockBatch[R any](ctx context.Context, s *Store, reqs []R, check func(R) error, op func(R, time.Time) (driver.LockState, error)) ([]driver.LockResult, error) {
	var invalid error
	for _, r := range reqs {
		if invalid = check(r); invalid != nil {
			break
		}
	}
	if err := s.begin(ctx, invalid); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	out := make([]driver.LockResult, len(reqs))
	for i, r := range reqs {
		out[i].State, out[i].Err = op(r, now)
	}
	return out, nil
}

// RefreshLocks implements driver.LockBatcher: every refresh of reqs under one hold of the
// store's mutex, each with RefreshLock's outcome (at one instant, now). Any invalid
// request fails the whole batch before anything changes.
func (s *Store) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	return lockBatch(ctx, s, reqs,
		func(r driver.LockRefresh) error { return driver.CheckLease(r.Key, r.Owner, r.TTL) },
		func(r driver.LockRefresh, now time.Time) (driver.LockState, error) {
			return s.refreshLocked(r.Key, r.Owner, r.TTL, now)
		})
}

// InspectLocks implements driver.LockBatcher: every lock of keys read under one hold of
// the store's mutex, each with InspectLock's outcome (NotFound for a free lock). Any
// invalid key fails the whole batch.
func (s *Store) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return lockBatch(ctx, s, keys,
		func(k dcsync.Key) error { return driver.ValidateKey("lock", k) },
		s.inspectLocked)
}

// AcquireLocks implements driver.LockMover: every acquire of reqs under one hold of the
// store's mutex, in order, each with AcquireLock's outcome (at one instant, now). Any
// invalid request fails the whole batch before anything changes.
func (s *Store) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	return lockBatch(ctx, s, reqs,
		func(r driver.LockAcquire) error { return driver.CheckLease(r.Key, r.Owner, r.TTL) },
		func(r driver.LockAcquire, now time.Time) (driver.LockState, error) {
			return s.acquireLocked(r.Key, r.Owner, r.TTL, now)
		})
}

// ReleaseLocks implements driver.LockMover: every release of reqs under one hold of the
// store's mutex, in order, each with ReleaseLock's outcome. Any invalid request fails
// the whole batch before anything changes.
func (s *Store) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	return lockBatch(ctx, s, reqs,
		func(r driver.LockRelease) error { return driver.CheckLock(r.Key, r.Owner, 0) },
		func(r driver.LockRelease, now time.Time) (driver.LockState, error) {
			return driver.LockState{}, s.releaseLocked(r.Key, r.Owner, now)
		})
}
