package driver

import (
	"context"
	"time"

	"github.com/dcsync/dcsync"
)

// LockAcquire is one lock of a [LockMover.AcquireLocks] call: take the lock at Key for
// Owner, for TTL, if it is free.
type LockAcquire struct {
	Key   dcsync.Key
	Owner string
	TTL   time.Duration
}

// LockRelease is one lock of a [LockMover.ReleaseLocks] call: free the lock at Key if
// Owner holds it.
type LockRelease struct {
	Key   dcsync.Key
	Owner string
}

// LockMover is implemented by stores that can take or free many locks in one round
// trip per store node (a queue consumer taking or handing over many partitions).
// Each lock's outcome is exactly that of the single operation (AcquireLock,
// ReleaseLock), as if the single operations were applied one after another in the
// order of the requests: a fresh fencing token above every earlier token of the key
// for a lock taken, the holder's state and LockUnavailable for a lock held by anyone
// (a key named twice is taken by its first request only), LockLost for a release of
// a lock the owner does not hold, leaving the holder alone. Result i belongs to
// request i. The returned error is for the batch as a whole (validation of any
// request, before any I/O; the context ending before anything was sent); per-lock
// failures, a Connection error for a lock whose part of the batch failed included,
// are in the results. Package lock uses it, when present, for Manager.TryAcquireMany
// and Manager.ReleaseMany.
type LockMover interface {
	AcquireLocks(ctx context.Context, reqs []LockAcquire) ([]LockResult, error)
	ReleaseLocks(ctx context.Context, reqs []LockRelease) ([]LockResult, error)
}

// AcquireLocks takes every lock of reqs through s's LockMover when it has one, else
// one AcquireLock at a time; see [LockMover].
func AcquireLocks(ctx context.Context, s LockStore, reqs []LockAcquire) ([]LockResult, error) {
	if b, ok := s.(LockMover); ok {
		return b.AcquireLocks(ctx, reqs)
	}
	return oneByOne(ctx, "driver.AcquireLocks", reqs,
		func(r LockAcquire) error { return CheckLease(r.Key, r.Owner, r.TTL) },
		func(r LockAcquire) (LockState, error) { return s.AcquireLock(ctx, r.Key, r.Owner, r.TTL) })
}

// ReleaseLocks frees every lock of reqs through s's LockMover when it has one, else
// one ReleaseLock at a time; see [LockMover].
func ReleaseLocks(ctx context.Context, s LockStore, reqs []LockRelease) ([]LockResult, error) {
	if b, ok := s.(LockMover); ok {
		return b.ReleaseLocks(ctx, reqs)
	}
	return oneByOne(ctx, "driver.ReleaseLocks", reqs,
		func(r LockRelease) error { return CheckLock(r.Key, r.Owner, 0) },
		func(r LockRelease) (LockState, error) { return LockState{}, s.ReleaseLock(ctx, r.Key, r.Owner) })
}
