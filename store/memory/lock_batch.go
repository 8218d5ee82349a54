package memory

import (
	"context"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.LockBatcher = (*Store)(nil)

// RefreshLocks implements driver.LockBatcher: every refresh of reqs under one hold of the
// store's mutex, each with RefreshLock's outcome (at one instant, now). Any invalid
// request fails the whole batch before anything changes.
func (s *Store) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	var check error
	for _, r := range reqs {
		if check = driver.CheckLease(r.Key, r.Owner, r.TTL); check != nil {
			break
		}
	}
	if err := s.begin(ctx, check); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	out := make([]driver.LockResult, len(reqs))
	for i, r := range reqs {
		out[i].State, out[i].Err = s.refreshLocked(r.Key, r.Owner, r.TTL, now)
	}
	return out, nil
}

// InspectLocks implements driver.LockBatcher: every lock of keys read under one hold of
// the store's mutex, each with InspectLock's outcome (NotFound for a free lock). Any
// invalid key fails the whole batch.
func (s *Store) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	var check error
	for _, k := range keys {
		if check = driver.ValidateKey("lock", k); check != nil {
			break
		}
	}
	if err := s.begin(ctx, check); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	out := make([]driver.LockResult, len(keys))
	for i, k := range keys {
		out[i].State, out[i].Err = s.inspectLocked(k, now)
	}
	return out, nil
}

var _ driver.LockMover = (*Store)(nil)

// AcquireLocks implements driver.LockMover: every acquire of reqs under one hold of the
// store's mutex, in order, each with AcquireLock's outcome (at one instant, now). Any
// invalid request fails the whole batch before anything changes.
func (s *Store) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	var check error
	for _, r := range reqs {
		if check = driver.CheckLease(r.Key, r.Owner, r.TTL); check != nil {
			break
		}
	}
	if err := s.begin(ctx, check); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	out := make([]driver.LockResult, len(reqs))
	for i, r := range reqs {
		out[i].State, out[i].Err = s.acquireLocked(r.Key, r.Owner, r.TTL, now)
	}
	return out, nil
}

// ReleaseLocks implements driver.LockMover: every release of reqs under one hold of the
// store's mutex, in order, each with ReleaseLock's outcome. Any invalid request fails
// the whole batch before anything changes.
func (s *Store) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	var check error
	for _, r := range reqs {
		if check = driver.CheckLock(r.Key, r.Owner, 0); check != nil {
			break
		}
	}
	if err := s.begin(ctx, check); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	out := make([]driver.LockResult, len(reqs))
	for i, r := range reqs {
		out[i].Err = s.releaseLocked(r.Key, r.Owner, now)
	}
	return out, nil
}
