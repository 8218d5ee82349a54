// Package dcsync holds what every part of dcsync shares: the scope of a lock or latch
// (client id, farm id, [Level]), the [Error] type and its codes, input validation, and the
// small store interfaces that back ends implement.
//
// Locks live in package lock and latches in package latch; stores live under store/. A
// store implements a handful of semantic operations, each atomic in its back end
// (acquire-if-free, owner-checked release, create-only counter, add, read-many); the lock
// and latch logic is written once, above them, and every store passes the conformance
// suite in store/storetest.
package dcsync

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Level is the scope of a lock or latch: one data center (farm) or all of them.
type Level int

const (
	// DC scopes a lock or latch to one farm. A DC latch reads and writes the caller's
	// farm cell only; a DC lock's key includes the farm, so two farms hold independent
	// locks of one name.
	DC Level = iota + 1
	// XDC scopes a lock or latch to all farms. An XDC latch still writes the caller's
	// farm cell but reads the sum of every farm's cell; an XDC lock has one holder
	// across all farms.
	XDC
)

// String returns "DC" or "XDC".
func (l Level) String() string {
	switch l {
	case DC:
		return "DC"
	case XDC:
		return "XDC"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// ParseLevel parses "dc" or "xdc" (any case).
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(s) {
	case "dc":
		return DC, nil
	case "xdc":
		return XDC, nil
	}
	return 0, Errorf(InvalidArgument, "dcsync.ParseLevel", "level %q is not dc or xdc", s)
}

// Key names one lock or latch in a store: who owns it (Client), where the caller runs
// (Farm), its Level and its Name. Farm is always the caller's farm, also for XDC: an XDC
// latch writes the caller's farm cell, and an XDC lock records which farm holds it.
type Key struct {
	Level  Level
	Client string
	Farm   string
	Name   string
}

// String renders the key for logs and errors, such as "DC/dc1/orders/batch-42".
func (k Key) String() string {
	return k.Level.String() + "/" + k.Farm + "/" + k.Client + "/" + k.Name
}

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
	AcquireLock(ctx context.Context, k Key, owner string, ttl time.Duration) (LockState, error)
	// RefreshLock extends owner's lease to ttl from now. It returns LockLost when owner
	// does not hold the lock (its lease lapsed, or another owner holds it), and changes
	// nothing then.
	RefreshLock(ctx context.Context, k Key, owner string, ttl time.Duration) (LockState, error)
	// ReleaseLock frees the lock if owner holds it, and returns LockLost otherwise,
	// leaving any other holder's lock untouched.
	ReleaseLock(ctx context.Context, k Key, owner string) error
	// InspectLock returns the holder's state, or NotFound when the lock is free.
	InspectLock(ctx context.Context, k Key) (LockState, error)
}

// LatchStore is the storage latches need. Every method is atomic in the back end and
// validates its input before any I/O. A latch exists, at level DC, when the caller's
// farm cell exists; at level XDC, when any farm's cell exists.
type LatchStore interface {
	// CreateLatch writes count into the caller's farm cell; the latch ends ttl from now
	// (at level XDC the whole latch, every farm's cell, ends then). If the latch exists
	// it returns AlreadyExists and changes nothing.
	CreateLatch(ctx context.Context, k Key, count int64, ttl time.Duration) error
	// EnsureLatch creates the latch with count 0 if it does not exist and leaves an
	// existing one untouched. It reports whether it created the latch.
	EnsureLatch(ctx context.Context, k Key, ttl time.Duration) (created bool, err error)
	// AddLatch adds delta to the caller's farm cell and returns the count at k's level
	// after the update. It never changes when the latch ends (a latch ends TTL after its
	// creation, whole at level XDC). It returns NotFound, and writes nothing, when the
	// latch does not exist, and InvalidArgument when the farm's count or the latch's sum
	// would overflow an int64 (see AddCount). An update is applied exactly once, also
	// when an attempt failed in doubt and was retried.
	AddLatch(ctx context.Context, k Key, delta int64) (int64, error)
	// ReadLatches reads many latches in one round trip where the back end allows it;
	// result i belongs to keys[i].
	ReadLatches(ctx context.Context, keys []Key) ([]LatchCount, error)
}

// Store is a complete back end: locks and latches, and Close.
type Store interface {
	LockStore
	LatchStore
	// Close releases the store's resources. Locks and latches it wrote stay.
	Close() error
}

// CloseNotifier is implemented by stores that can tell when they are closed: Done
// returns a channel that Close closes (once, however often Close is called). Latch
// Waits on such a store end at once, with a Connection error, when it closes; every
// store in this module implements it.
type CloseNotifier interface {
	Done() <-chan struct{}
}
