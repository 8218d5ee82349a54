package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Safety margin of `lock run`: the command is treated as unprotected from
// sent + TTL - TTL/leaseDriftDivisor - leaseSlack on, where sent is when the last
// successful acquisition or renewal was sent, by this process's clock. The store starts
// the lease no earlier than that, so by the store's clock the lease lasts past this
// point by the margin: room for clock-rate drift between the hosts (TTL/20: 5%), for
// stores that keep expiries in whole milliseconds, and for the time between the
// decision to kill and the command's death (leaseSlack).
const (
	leaseDriftDivisor = 20
	leaseSlack        = 100 * time.Millisecond
)

// safeEnd is when a lease of ttl, acquired or renewed by a request sent at sent, must be
// treated as over.
func safeEnd(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - ttl/leaseDriftDivisor - leaseSlack)
}

// heldLease is a lease a command runs under (lock run, semaphore run): one lock, or
// the permits of a semaphore.
type heldLease struct {
	ttl       time.Duration
	keepAlive func(context.Context) context.Context // ends when the lease is lost
	release   func(context.Context) error
	env       []string // for the command: what identifies the lease (token, owner)
	what      string   // the lease in messages, `leadership of election "e"`; default `lease on "NAME"`
}

// says names the lease h of name in messages.
func (h *heldLease) says(name string) string {
	if h.what != "" {
		return h.what
	}
	return fmt.Sprintf("lease on %q", name)
}

// leaseClock wraps the lock store of `lock run` (and `semaphore run`) to learn when
// each successful acquisition or renewal was sent, and so when the lease must be
// treated as over by this process's clock. (lock.Lock keeps such a deadline for
// KeepAlive but does not expose it; this wrapper sees the same calls KeepAlive makes.)
// It keeps an end per lock key, and the lease is over at the earliest: a semaphore's
// permits are one lock each. A lock released through it is forgotten.
type leaseClock struct {
	driver.LockStore

	mu      sync.Mutex
	ends    map[dcsync.Key]time.Time
	changed chan struct{} // a token when End moved; capacity 1
}

func newLeaseClock(s driver.LockStore) *leaseClock {
	return &leaseClock{LockStore: s, ends: map[dcsync.Key]time.Time{}, changed: make(chan struct{}, 1)}
}

// End returns the safe end of the lease: the earliest of the held locks' (zero before
// the first acquisition).
func (c *leaseClock) End() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endLocked()
}

func (c *leaseClock) endLocked() time.Time {
	var end time.Time
	for _, e := range c.ends {
		if end.IsZero() || e.Before(end) {
			end = e
		}
	}
	return end
}

// extend moves the end of k's lease to the safe end of a lease sent at sent, if that
// is later.
func (c *leaseClock) extend(k dcsync.Key, sent time.Time, ttl time.Duration) {
	end := safeEnd(sent, ttl)
	c.mu.Lock()
	before := c.endLocked()
	if end.After(c.ends[k]) {
		c.ends[k] = end
	}
	moved := !c.endLocked().Equal(before)
	c.mu.Unlock()
	if moved {
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
}

// ReleaseLock forgets k's lease, whatever the store answers: the clock keeps the ends
// of the leases the run relies on, and a lease given up (a semaphore's give-back of a
// partial take, a final release) is not one of them even if its release failed;
// keeping its end would stop the command at the end of a lease nobody renews. (The
// end this makes later is not signalled: the guardian keeps the earlier one until the
// next renewal.)
func (c *leaseClock) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	err := c.LockStore.ReleaseLock(ctx, k, owner)
	c.mu.Lock()
	delete(c.ends, k)
	c.mu.Unlock()
	return err
}

// AcquireLock records when a successful acquisition was sent.
func (c *leaseClock) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	sent := time.Now()
	st, err := c.LockStore.AcquireLock(ctx, k, owner, ttl)
	if err == nil {
		c.extend(k, sent, ttl)
	}
	return st, err
}

// RefreshLock records when a successful renewal was sent.
func (c *leaseClock) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	sent := time.Now()
	st, err := c.LockStore.RefreshLock(ctx, k, owner, ttl)
	if err == nil {
		c.extend(k, sent, ttl)
	}
	return st, err
}

// The batched calls (driver.LockBatcher, driver.LockMover) go to the store's own
// batched call where it has one, else one lock at a time as a front end would send
// them, so that a run holding many locks keeps the store's batches: semaphore run's
// permits renewed in one call per interval, rwlock run's writer reading every reader
// slot in one call per poll. A lease taken or renewed in a batch moves its end as the
// single calls do.

// InspectLocks reads the locks of keys; reads need no lease clock.
func (c *leaseClock) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return driver.InspectLocks(ctx, c.LockStore, keys)
}

// RefreshLocks records when each successful renewal of reqs was sent.
func (c *leaseClock) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	sent := time.Now()
	res, err := driver.RefreshLocks(ctx, c.LockStore, reqs)
	if err == nil {
		c.extendEach(sent, res, len(reqs), func(i int) (dcsync.Key, time.Duration) { return reqs[i].Key, reqs[i].TTL })
	}
	return res, err
}

// AcquireLocks records when each successful acquisition of reqs was sent.
func (c *leaseClock) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	sent := time.Now()
	res, err := driver.AcquireLocks(ctx, c.LockStore, reqs)
	if err == nil {
		c.extendEach(sent, res, len(reqs), func(i int) (dcsync.Key, time.Duration) { return reqs[i].Key, reqs[i].TTL })
	}
	return res, err
}

// extendEach extends, as sent at sent, the lease of each of a batch's first n requests
// whose result succeeded; lease gives request i's key and TTL.
func (c *leaseClock) extendEach(sent time.Time, res []driver.LockResult, n int, lease func(i int) (dcsync.Key, time.Duration)) {
	for i, r := range res {
		if r.Err == nil && i < n {
			k, ttl := lease(i)
			c.extend(k, sent, ttl)
		}
	}
}

// ReleaseLocks forgets the leases of reqs whatever the store answers, as ReleaseLock
// does.
func (c *leaseClock) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	res, err := driver.ReleaseLocks(ctx, c.LockStore, reqs)
	c.mu.Lock()
	for _, r := range reqs {
		delete(c.ends, r.Key)
	}
	c.mu.Unlock()
	return res, err
}

// checkKillAfter checks --kill-after of a run command (lock, rwlock, semaphore run,
// election campaign): not negative and, when given, at most a third of the TTL.
func checkKillAfter(c *cobra.Command, killAfter, ttl time.Duration) error {
	if killAfter < 0 {
		return withCode(exitUsage, fmt.Errorf("--kill-after %v is negative", killAfter))
	}
	if c.Flags().Changed("kill-after") && killAfter > ttl/3 {
		return withCode(exitUsage, fmt.Errorf("--kill-after %v is longer than a third of --ttl %v (at most %v)", killAfter, ttl, ttl/3))
	}
	return nil
}

// checkConflictCode checks --conflict-exit-code of a run command and reports whether
// it was given.
func checkConflictCode(c *cobra.Command, code int) (bool, error) {
	set := c.Flags().Changed("conflict-exit-code")
	if set && (code < 0 || code > 255) {
		return set, withCode(exitUsage, fmt.Errorf("--conflict-exit-code %d is not in 0..255", code))
	}
	return set, nil
}
