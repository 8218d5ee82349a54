package semaphore_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/benchratio"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/semaphore"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
)

// counting wraps a store and counts the calls that reach it: one per batch on a store
// that has the batch capability, one per lock on one that does not (the loop
// fallback's calls go through the single operations, which count).
type counting struct {
	driver.Store
	regs  driver.RegisterStore
	calls atomic.Int64
}

func (c *counting) single() driver.LockStore { return struct{ driver.LockStore }{c} }

func (c *counting) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	c.calls.Add(1)
	return c.Store.AcquireLock(ctx, k, owner, ttl)
}

func (c *counting) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	c.calls.Add(1)
	return c.Store.RefreshLock(ctx, k, owner, ttl)
}

func (c *counting) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	c.calls.Add(1)
	return c.Store.ReleaseLock(ctx, k, owner)
}

func (c *counting) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	c.calls.Add(1)
	return c.Store.InspectLock(ctx, k)
}

func (c *counting) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	if b, ok := c.Store.(driver.LockBatcher); ok {
		c.calls.Add(1)
		return b.InspectLocks(ctx, keys)
	}
	return driver.InspectLocks(ctx, c.single(), keys)
}

func (c *counting) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	if b, ok := c.Store.(driver.LockBatcher); ok {
		c.calls.Add(1)
		return b.RefreshLocks(ctx, reqs)
	}
	return driver.RefreshLocks(ctx, c.single(), reqs)
}

func (c *counting) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	if b, ok := c.Store.(driver.LockMover); ok {
		c.calls.Add(1)
		return b.AcquireLocks(ctx, reqs)
	}
	return driver.AcquireLocks(ctx, c.single(), reqs)
}

func (c *counting) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	if b, ok := c.Store.(driver.LockMover); ok {
		c.calls.Add(1)
		return b.ReleaseLocks(ctx, reqs)
	}
	return driver.ReleaseLocks(ctx, c.single(), reqs)
}

func (c *counting) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	c.calls.Add(1)
	return c.regs.SwapRegister(ctx, k, gen, value)
}

func (c *counting) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	c.calls.Add(1)
	return c.regs.ReadRegisters(ctx, keys)
}

// BenchmarkRatio runs the acquire and release of one permit of a 4-permit semaphore
// (TryAcquire(1) + Release) and the acquire and release of a lock (lock.Manager
// TryAcquire + Release) alternately in one loop, on memory and on SQLite, so that the
// noise of a shared machine falls on both alike, and reports each side's median, the
// ratio of their medians (ratio-p50) and means (ratio-mean), and the store calls of each
// side per acquire+release (sem-calls/op, lock-calls/op: counted, so noise cannot
// change them).
func BenchmarkRatio(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) driver.Store
	}{
		{"memory", func(*testing.B) driver.Store { return memory.New() }},
		{"sqlite", func(b *testing.B) driver.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	for _, st := range stores {
		b.Run(st.name+"/PermitVsLock", func(b *testing.B) {
			ctx := context.Background()
			s := st.open(b)
			defer s.Close()
			c := &counting{Store: s, regs: s}
			sm, err := semaphore.New(c, "bench", "dc1")
			if err != nil {
				b.Fatal(err)
			}
			lm, err := lock.New(c, "bench", "dc1")
			if err != nil {
				b.Fatal(err)
			}
			sem, err := sm.Open(ctx, "ratio", 4)
			if err != nil {
				b.Fatal(err)
			}
			permit := func() error {
				p, err := sem.TryAcquire(ctx, 1)
				if err != nil {
					return err
				}
				return p.Release(ctx)
			}
			raw := func() error {
				l, err := lm.TryAcquire(ctx, "ratio-lock")
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
			if err := permit(); err != nil { // untimed: the first round reads the count
				b.Fatal(err)
			}
			benchratio.Run(b, benchratio.Names{P50: "sem-p50-ns", RawP50: "lock-p50-ns", Calls: "sem-calls/op", RawCalls: "lock-calls/op"},
				c.calls.Load, permit, raw)
		})
	}
}
