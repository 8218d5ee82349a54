package aerospike_test

import (
	"context"
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/layout"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/aerospike"
	"github.com/dcsync/dcsync/store/storetest"
)

// Each benchmark runs dcsync's operation and the raw client operation the Java library
// sends for it against the real server ($DCSYNC_AEROSPIKE), in the same run, and reports
// p50/p99 latency next to ns/op (storetest.Timed). docs/benchmarks-aerospike.md has the
// figures and how they were taken.

func benchSetup(b *testing.B) (*as.Client, *aerospike.Store) {
	c := realClient(b)
	return c, newStore(b, c, aerospike.Config{})
}

// BenchmarkStore runs the suite's benchmarks (storetest.Bench), the wake-up latency of
// Wait included.
func BenchmarkStore(b *testing.B) {
	_, s := benchSetup(b)
	storetest.Bench(b, s)
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
		storetest.Timed(b, func() error {
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
		storetest.Timed(b, func() error {
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
		storetest.Timed(b, func() error { _, err := l.CountDown(ctx); return err })
	})
	b.Run("raw", func(b *testing.B) {
		// AerospikeLatchStorage.java:146-155: an UPDATE_ONLY add, at either level.
		k := key(b, latchSet, layout.AerospikeLatchKey("bench", unique("raw-cd")))
		if err := javaCreateLatch(c, k, "dc1", 1<<40); err != nil {
			b.Fatal(err)
		}
		wp := as.NewWritePolicy(0, 60)
		wp.RecordExistsAction = as.UPDATE_ONLY
		storetest.Timed(b, func() error {
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
		storetest.Timed(b, func() error {
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
		storetest.Timed(b, func() error {
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
