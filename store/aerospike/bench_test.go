package aerospike_test

import (
	"context"
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/internal/benchratio"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/layout"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/aerospike"
)

// Each benchmark runs dcsync's operation and the raw client operation the Java library
// sends for it against the real server ($DCSYNC_AEROSPIKE), in the same run, and reports
// p50/p99 latency next to ns/op (drivertest.Timed). docs/benchmarks-aerospike.md has the
// figures and how they were taken.

func benchSetup(b *testing.B) (*as.Client, *aerospike.Store) {
	c := realClient(b)
	return c, newStore(b, c, aerospike.Config{})
}

// BenchmarkStore runs the suite's benchmarks (drivertest.Bench), the wake-up latency of
// Wait included.
func BenchmarkStore(b *testing.B) {
	_, s := benchSetup(b)
	drivertest.Bench(b, s)
}

func BenchmarkLockAcquireRelease(b *testing.B) {
	c, s := benchSetup(b)
	ctx := context.Background()
	b.Run("dcsync", func(b *testing.B) {
		m, err := lock.New(s, "bench", "dc1")
		if err != nil {
			b.Fatal(err)
		}
		name := unique("lock")
		drivertest.Timed(b, func() error {
			l, err := m.TryAcquire(ctx, name)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	b.Run("raw", func(b *testing.B) {
		// AerospikeStore.java:56-69 (generation-0 put) and :84-88 (delete).
		k := key(b, dc1Locks, "bench#"+unique("rawlock"))
		put := as.NewWritePolicy(0, 60)
		put.GenerationPolicy = as.EXPECT_GEN_EQUAL
		del := as.NewWritePolicy(0, 0)
		drivertest.Timed(b, func() error {
			if err := c.Put(put, k, as.BinMap{"dc1##data": 1, "dc1##uat": time.Now().UnixMilli()}); err != nil {
				return err
			}
			_, err := c.Delete(del, k)
			return err
		})
	})
}

func benchCountDown(b *testing.B, level dcsync.Level) {
	c, s := benchSetup(b)
	ctx := context.Background()
	b.Run("dcsync", func(b *testing.B) {
		m, _ := latch.New(s, "bench", "dc1")
		l, err := m.CreateCountDown(ctx, unique("cd"), 1<<40, latch.Level(level))
		if err != nil {
			b.Fatal(err)
		}
		drivertest.Timed(b, func() error { _, err := l.CountDown(ctx); return err })
	})
	b.Run("raw", func(b *testing.B) {
		// AerospikeLatchStorage.java:146-155: an UPDATE_ONLY add, at either level.
		k := key(b, latchSet, layout.AerospikeLatchKey("bench", unique("raw-cd")))
		if err := javaCreateLatch(c, k, "dc1", 1<<40); err != nil {
			b.Fatal(err)
		}
		wp := as.NewWritePolicy(0, 60)
		wp.RecordExistsAction = as.UPDATE_ONLY
		drivertest.Timed(b, func() error {
			_, err := c.Operate(wp, k, as.AddOp(as.NewBin("count#dc1", -1)))
			return err
		})
	})
}

func BenchmarkLatchCountDown(b *testing.B)    { benchCountDown(b, dcsync.DC) }
func BenchmarkLatchCountDownXDC(b *testing.B) { benchCountDown(b, dcsync.XDC) }

func benchCount(b *testing.B, level dcsync.Level) {
	c, s := benchSetup(b)
	ctx := context.Background()
	b.Run("dcsync", func(b *testing.B) {
		m, _ := latch.New(s, "bench", "dc1")
		l, err := m.CreateCountDown(ctx, unique("count"), 5, latch.Level(level))
		if err != nil {
			b.Fatal(err)
		}
		drivertest.Timed(b, func() error {
			n, err := l.Count(ctx)
			if err == nil && n != 5 {
				b.Fatalf("count %d, want 5", n)
			}
			return err
		})
	})
	b.Run("raw", func(b *testing.B) {
		// AerospikeLatchStorage.java:99-119: a get of the record; DC reads one bin,
		// XDC sums the bins named count#*.
		k := key(b, latchSet, layout.AerospikeLatchKey("bench", unique("raw-count")))
		if err := javaCreateLatch(c, k, "dc1", 5); err != nil {
			b.Fatal(err)
		}
		drivertest.Timed(b, func() error {
			rec, err := c.Get(nil, k)
			if err != nil {
				return err
			}
			var n int
			for name, v := range rec.Bins {
				if level == dcsync.XDC && strings.Contains(name, "count#") || name == "count#dc1" {
					n += v.(int)
				}
			}
			if n != 5 {
				b.Fatalf("count %d, want 5", n)
			}
			return nil
		})
	})
}

func BenchmarkLatchCount(b *testing.B)    { benchCount(b, dcsync.DC) }
func BenchmarkLatchCountXDC(b *testing.B) { benchCount(b, dcsync.XDC) }

// BenchmarkRatio runs each dcsync operation and its raw counterpart alternately in one
// loop, so that the noise of a shared machine falls on both alike, and reports the
// ratio of their medians (ratio-p50) and of their means (ratio-mean) beside each side's
// median latency. ns/op is the pair's.
func BenchmarkRatio(b *testing.B) {
	c, s := benchSetup(b)
	ctx := context.Background()
	lm, err := lock.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	m, err := latch.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	rawLatch := func(count int64) *as.Key {
		k := key(b, latchSet, layout.AerospikeLatchKey("bench", unique("raw")))
		if err := javaCreateLatch(c, k, "dc1", count); err != nil {
			b.Fatal(err)
		}
		return k
	}
	update := as.NewWritePolicy(0, 60)
	update.RecordExistsAction = as.UPDATE_ONLY
	rawCount := func(k *as.Key, xdc bool) func() error {
		return func() error {
			rec, err := c.Get(nil, k)
			if err != nil {
				return err
			}
			var n int
			for name, v := range rec.Bins {
				if xdc && strings.Contains(name, "count#") || name == "count#dc1" {
					n += v.(int)
				}
			}
			_ = n
			return nil
		}
	}
	pairs := []struct {
		name        string
		dcsync, raw func() error
	}{}
	{
		name := unique("lock")
		k := key(b, dc1Locks, "bench#"+unique("rawlock"))
		put := as.NewWritePolicy(0, 60)
		put.GenerationPolicy = as.EXPECT_GEN_EQUAL
		pairs = append(pairs, struct {
			name        string
			dcsync, raw func() error
		}{"LockAcquireRelease", func() error {
			l, err := lm.TryAcquire(ctx, name)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}, func() error {
			if err := c.Put(put, k, as.BinMap{"dc1##data": 1, "dc1##uat": time.Now().UnixMilli()}); err != nil {
				return err
			}
			_, err := c.Delete(nil, k)
			return err
		}})
	}
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		sfx := ""
		if level == dcsync.XDC {
			sfx = "XDC"
		}
		d, err := m.CreateCountDown(ctx, unique("cd"), 1<<40, latch.Level(level))
		if err != nil {
			b.Fatal(err)
		}
		rk := rawLatch(1 << 40)
		pairs = append(pairs, struct {
			name        string
			dcsync, raw func() error
		}{"LatchCountDown" + sfx, func() error { _, err := d.CountDown(ctx); return err }, func() error {
			_, err := c.Operate(update, rk, as.AddOp(as.NewBin("count#dc1", -1)))
			return err
		}})
		rc := rawLatch(5)
		pairs = append(pairs, struct {
			name        string
			dcsync, raw func() error
		}{"LatchCount" + sfx, func() error { _, err := d.Count(ctx); return err }, rawCount(rc, level == dcsync.XDC)})
	}
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			benchratio.Run(b, benchratio.Default, nil, p.dcsync, p.raw)
		})
	}
}
