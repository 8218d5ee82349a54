package semaphore_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
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
			ld := make([]time.Duration, 0, b.N)
			lr := make([]time.Duration, 0, b.N)
			var semCalls, lockCalls int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c0 := c.calls.Load()
				t0 := time.Now()
				if err := permit(); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				c1 := c.calls.Load()
				if err := raw(); err != nil {
					b.Fatal(err)
				}
				ld, lr = append(ld, t1.Sub(t0)), append(lr, time.Since(t1))
				semCalls += c1 - c0
				lockCalls += c.calls.Load() - c1
			}
			b.StopTimer()
			med := func(l []time.Duration) float64 {
				l = slices.Clone(l)
				slices.Sort(l)
				return float64(l[len(l)/2])
			}
			mean := func(l []time.Duration) float64 {
				var sum time.Duration
				for _, d := range l {
					sum += d
				}
				return float64(sum) / float64(len(l))
			}
			b.ReportMetric(med(ld), "sem-p50-ns")
			b.ReportMetric(med(lr), "lock-p50-ns")
			b.ReportMetric(med(ld)/med(lr), "ratio-p50")
			b.ReportMetric(mean(ld)/mean(lr), "ratio-mean")
			b.ReportMetric(float64(semCalls)/float64(b.N), "sem-calls/op")
			b.ReportMetric(float64(lockCalls)/float64(b.N), "lock-calls/op")
		})
	}
}
