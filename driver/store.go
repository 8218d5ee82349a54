package driver

import (
	"context"
	"github.com/dcsync/dcsync"
	"time"
)

// LockState is the stored state of a held lock.
type LockState struct {
	// Owner identifies the acquisition that holds the lock. It is empty for a lock
	// written by a Java client, which records no owner.
	Owner string
	// Token is the fencing token of the acquisition: it strictly increases per lock key
	// across every acquisition, including after a lease expires. 0 for a Java-held lock.
	Token uint64
	// Expires is when the lease ends unless refreshed, by the store's clock.
	Expires time.Time
}

// LatchCount is one latch's count as read at its key's level.
type LatchCount struct {
	// Found is false when the latch does not exist (never created, or expired).
	Found bool
	// Count is the farm cell (DC) or the sum of all farm cells (XDC).
	Count int64
}

// LockStore is the storage a lock manager needs. Every method is atomic in the back end
// and validates its input before any I/O.
type LockStore interface {
	// AcquireLock takes the lock at k for owner, for ttl, when nobody holds it (no
	// record, or its lease has lapsed), and returns the new state with a fresh fencing
	// token greater than any earlier token of k. When someone else holds it, it returns
	// their state and an error with code LockUnavailable.
	AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (LockState, error)
	// RefreshLock extends owner's lease to ttl from now. It returns LockLost when owner
	// does not hold the lock (its lease lapsed, or another owner holds it), and changes
	// nothing then.
	RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (LockState, error)
	// ReleaseLock frees the lock if owner holds it, and returns LockLost otherwise,
	// leaving any other holder's lock untouched.
	ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error
	// InspectLock returns the holder's state, or NotFound when the lock is free.
	InspectLock(ctx context.Context, k dcsync.Key) (LockState, error)
}

// LatchStore is the storage latches need. Every method is atomic in the back end and
// validates its input before any I/O. A latch exists, at level DC, when the caller's
// farm cell exists; at level XDC, when any farm's cell exists.
type LatchStore interface {
	// CreateLatch writes count into the caller's farm cell; the latch ends ttl from now
	// (at level XDC the whole latch, every farm's cell, ends then). If the latch exists
	// it returns AlreadyExists and changes nothing.
	CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error
	// EnsureLatch creates the latch with count 0 if it does not exist and leaves an
	// existing one untouched. It reports whether it created the latch.
	EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (created bool, err error)
	// AddLatch adds delta to the caller's farm cell and returns the count at k's level
	// after the update. It never changes when the latch ends (a latch ends TTL after its
	// creation, whole at level XDC). It returns NotFound, and writes nothing, when the
	// latch does not exist, and InvalidArgument when the farm's count or the latch's sum
	// would overflow an int64 (see AddCount). An update is applied exactly once, also
	// when an attempt failed in doubt and was retried.
	AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error)
	// ReadLatches reads many latches in one round trip where the back end allows it;
	// result i belongs to keys[i].
	ReadLatches(ctx context.Context, keys []dcsync.Key) ([]LatchCount, error)
}

// Store is the one contract a back end implements: locks, latches, queues and
// registers, and Close. storeurl.Open returns one, and lock.New, latch.New and queue.Create/Open
// accept one. What a back end may offer beyond it is an optional capability, each
// an interface of this package found by type assertion: [CloseNotifier],
// [LockLister], [LatchLister], [LatchDeleter], [QueueLister], [QueueDeleter],
// [QueueTxCommitter], [LockBatcher], [LockMover], [QueueClaimer], [QueueCommitter],
// [QueueBatchReader] and [Baseliner].
type Store interface {
	LockStore
	LatchStore
	QueueStore
	RegisterStore
	// Close releases the store's resources. What it wrote stays.
	Close() error
}

// CloseNotifier is implemented by stores that can tell when they are closed: Done
// returns a channel that Close closes (once, however often Close is called). Latch
// Waits on such a store end at once, with a Connection error, when it closes; every
// store in this module implements it.
type CloseNotifier interface {
	Done() <-chan struct{}
}
