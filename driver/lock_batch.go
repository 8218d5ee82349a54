package driver

import (
	"context"
	"time"

	"github.com/dcsync/dcsync"
)

// LockRefresh is one lease of a [LockBatcher.RefreshLocks] call: extend Owner's lease
// of the lock at Key to TTL from now.
type LockRefresh struct {
	Key   dcsync.Key
	Owner string
	TTL   time.Duration
}

// LockResult is the outcome of one lock of a batch: what the single operation
// (RefreshLock or InspectLock) would have returned for it.
type LockResult struct {
	// State is the lock's state as the single operation returns it. For a refresh,
	// Expires is the new end of the lease by the caller's clock (sent + TTL); Token may
	// be 0 when the back end does not read it back in the batch (the holder knows it).
	State LockState
	// Err is nil, or the single operation's typed error for this lock (LockLost for a
	// refresh of a lock the owner no longer holds, NotFound for an inspect of a free
	// lock, Connection when this lock's part of the batch failed).
	Err error
}

// LockBatcher is implemented by stores that can refresh or inspect many locks in one
// round trip per store node. Each lock's outcome is exactly that of the single
// operation (same conditions, same late-write guarantees); only the number of calls
// differs. Result i belongs to request i. The returned error is for the batch as a
// whole (validation of any request, before any I/O; the context ending before
// anything was sent); per-lock failures are in the results. Package lock uses it, when
// present, to renew every KeepAlive lease of a Manager with one call per renewal
// interval, and package queue to read a group's membership in one call.
type LockBatcher interface {
	RefreshLocks(ctx context.Context, reqs []LockRefresh) ([]LockResult, error)
	InspectLocks(ctx context.Context, keys []dcsync.Key) ([]LockResult, error)
}

// RefreshLocks refreshes every lease of reqs through s's LockBatcher when it has one,
// else one RefreshLock at a time; see [LockBatcher].
func RefreshLocks(ctx context.Context, s LockStore, reqs []LockRefresh) ([]LockResult, error) {
	if b, ok := s.(LockBatcher); ok {
		return b.RefreshLocks(ctx, reqs)
	}
	for _, r := range reqs {
		if err := CheckLease(r.Key, r.Owner, r.TTL); err != nil {
			return nil, err
		}
	}
	out := make([]LockResult, len(reqs))
	for i, r := range reqs {
		if err := ctx.Err(); err != nil && i == 0 {
			return nil, Wrap(err, dcsync.Internal, "driver.RefreshLocks")
		}
		out[i].State, out[i].Err = s.RefreshLock(ctx, r.Key, r.Owner, r.TTL)
	}
	return out, nil
}

// InspectLocks inspects every lock of keys through s's LockBatcher when it has one,
// else one InspectLock at a time; see [LockBatcher].
func InspectLocks(ctx context.Context, s LockStore, keys []dcsync.Key) ([]LockResult, error) {
	if b, ok := s.(LockBatcher); ok {
		return b.InspectLocks(ctx, keys)
	}
	for _, k := range keys {
		if err := ValidateKey("lock", k); err != nil {
			return nil, err
		}
	}
	out := make([]LockResult, len(keys))
	for i, k := range keys {
		if err := ctx.Err(); err != nil && i == 0 {
			return nil, Wrap(err, dcsync.Internal, "driver.InspectLocks")
		}
		out[i].State, out[i].Err = s.InspectLock(ctx, k)
	}
	return out, nil
}
