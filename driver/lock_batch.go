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
	return oneByOne(ctx, "driver.RefreshLocks", reqs,
		func(r LockRefresh) error { return CheckLease(r.Key, r.Owner, r.TTL) },
		func(r LockRefresh) (LockState, error) { return s.RefreshLock(ctx, r.Key, r.Owner, r.TTL) })
}

// InspectLocks inspects every lock of keys through s's LockBatcher when it has one,
// else one InspectLock at a time; see [LockBatcher].
func InspectLocks(ctx context.Context, s LockStore, keys []dcsync.Key) ([]LockResult, error) {
	if b, ok := s.(LockBatcher); ok {
		return b.InspectLocks(ctx, keys)
	}
	return oneByOne(ctx, "driver.InspectLocks", keys,
		func(k dcsync.Key) error { return ValidateKey("lock", k) },
		func(k dcsync.Key) (LockState, error) { return s.InspectLock(ctx, k) })
}

// oneByOne is the loop fallback of the batched lock calls: every request checked
// first (an invalid one fails the batch before anything is done), then op on each in
// order; a ctx that has ended before the first is the batch's error.
func oneByOne[R any](ctx context.Context, op string, reqs []R, check func(R) error, do func(R) (LockState, error)) ([]LockResult, error) {
	for _, r := range reqs {
		if err := check(r); err != nil {
			return nil, err
		}
	}
	out := make([]LockResult, len(reqs))
	for i, r := range reqs {
		if err := ctx.Err(); err != nil && i == 0 {
			return nil, Wrap(err, dcsync.Internal, op)
		}
		out[i].State, out[i].Err = do(r)
	}
	return out, nil
}
