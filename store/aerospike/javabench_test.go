package aerospike_test

import (
	"context"
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/javaclients"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/layout"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/aerospike"
)

// javaBenchRounds is how many rounds (a Java block, a dcsync block, a raw block of b.N
// iterations each) BenchmarkJavaRatio runs per operation; javaBenchWarmup how many
// untimed iterations warm the JVM's JIT (and the Go side) first.
const (
	javaBenchRounds = 5
	javaBenchWarmup = 3000
)

// BenchmarkJavaRatio compares dcsync's operation with the Java library's own operation
// (testenv/javaclients, timed in the JVM on the real Aerospike Java client, after a
// warm-up) and with the raw Go client operation the Java library sends, on the same
// server in one run: javaBenchRounds rounds of a Java block, a dcsync block and a raw
// block of b.N iterations each, reporting each side's p50 and p99 and the medians of the
// per-round ratios of p50s (dcsync/java, dcsync/raw, java/raw).
//
//	LockAcquireRelease  lock.Manager TryAcquire + Release  vs  LockBase.tryAcquireLock + releaseLock  vs  gen-0 put + delete
//	LatchCountDown      CountDown (DC)                     vs  decrementCount                         vs  operate add, UPDATE_ONLY
//	LatchCountXDC       Count (XDC)                        vs  getCount(XDC)                          vs  get, sum of count#* bins
//
// Run: go test -run '^$' -bench JavaRatio -benchtime 500x ./store/aerospike/
// (needs $DCSYNC_AEROSPIKE, Java 17 and Maven; skipped without them unless CI=true).
func BenchmarkJavaRatio(b *testing.B) {
	addr := realServer(b)
	tool := javaclients.Require(b, javaclients.Config{Aerospike: addr, AerospikeNamespace: namespace})
	c := realClient(b)
	s := newStore(b, c, aerospike.Config{})
	ctx := context.Background()
	lm, err := lock.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	m, err := latch.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	javaLatch := func(count int64) javaclients.AerospikeLatch {
		l := javaclients.AerospikeLatch{NS: namespace, SetSuffix: aerospike.DefaultLatchSetSuffix, Client: "bench",
			Latch: unique("java"), Farm: "dc1", TTL: 3600}
		if err := tool.AerospikeLatchCreate(ctx, l, count); err != nil {
			b.Fatal(err)
		}
		return l
	}
	rawLatch := func(count int64) *as.Key {
		k := key(b, latchSet, layout.AerospikeLatchKey("bench", unique("raw")))
		// As javaCreateLatch, with an hour's TTL: the warm-ups take minutes on a loaded machine.
		wp := as.NewWritePolicy(0, 3600)
		wp.RecordExistsAction = as.CREATE_ONLY
		if err := c.Put(wp, k, as.BinMap{"count#dc1": count}); err != nil {
			b.Fatal(err)
		}
		return k
	}

	type bench struct {
		name              string
		java, dcsync, raw javaclients.Block
	}
	var benches []bench
	{
		name := unique("lock")
		jl := javaclients.AerospikeLock{NS: namespace, SetSuffix: aerospike.DefaultLockSetSuffix, Level: "DC", Farm: "dc1",
			Client: "bench", Lock: unique("java")}
		k := key(b, dc1Locks, "bench#"+unique("rawlock"))
		put := as.NewWritePolicy(0, 60)
		put.GenerationPolicy = as.EXPECT_GEN_EQUAL
		benches = append(benches, bench{"LockAcquireRelease",
			func(n int) ([]time.Duration, error) {
				t, err := tool.AerospikeBenchLock(ctx, jl, time.Minute, n, 0)
				return t.Durations(), err
			},
			javaclients.GoBlock(func() error {
				l, err := lm.TryAcquire(ctx, name)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}),
			javaclients.GoBlock(func() error {
				if err := c.Put(put, k, as.BinMap{"dc1##data": 1, "dc1##uat": time.Now().UnixMilli()}); err != nil {
					return err
				}
				_, err := c.Delete(nil, k)
				return err
			}),
		})
	}
	{
		d, err := m.CreateCountDown(ctx, unique("cd"), 1<<40)
		if err != nil {
			b.Fatal(err)
		}
		jl := javaLatch(1 << 40)
		rk := rawLatch(1 << 40)
		update := as.NewWritePolicy(0, 60)
		update.RecordExistsAction = as.UPDATE_ONLY
		benches = append(benches, bench{"LatchCountDown",
			func(n int) ([]time.Duration, error) {
				t, err := tool.AerospikeBenchLatch(ctx, javaclients.BenchCountDown, jl, "DC", n, 0)
				return t.Durations(), err
			},
			javaclients.GoBlock(func() error { _, err := d.CountDown(ctx); return err }),
			javaclients.GoBlock(func() error {
				_, err := c.Operate(update, rk, as.AddOp(as.NewBin("count#dc1", -1)))
				return err
			}),
		})
	}
	{
		d, err := m.CreateCountDown(ctx, unique("count"), 5, latch.Level(dcsync.XDC))
		if err != nil {
			b.Fatal(err)
		}
		jl := javaLatch(5)
		rk := rawLatch(5)
		benches = append(benches, bench{"LatchCountXDC",
			func(n int) ([]time.Duration, error) {
				t, err := tool.AerospikeBenchLatch(ctx, javaclients.BenchCount, jl, "XDC", n, 0)
				return t.Durations(), err
			},
			javaclients.GoBlock(func() error {
				n, err := d.Count(ctx)
				if err == nil && n != 5 {
					b.Fatalf("count %d, want 5", n)
				}
				return err
			}),
			javaclients.GoBlock(func() error {
				rec, err := c.Get(nil, rk)
				if err != nil {
					return err
				}
				var n int
				for name, v := range rec.Bins {
					if strings.Contains(name, "count#") {
						n += v.(int)
					}
				}
				if n != 5 {
					b.Fatalf("raw count %d, want 5", n)
				}
				return nil
			}),
		})
	}
	for _, bn := range benches {
		warmed := false
		b.Run(bn.name, func(b *testing.B) {
			if !warmed {
				warmed = true
				for _, w := range []javaclients.Block{bn.java, bn.dcsync, bn.raw} {
					if _, err := w(javaBenchWarmup); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			cmp, err := javaclients.Compare(javaBenchRounds, b.N, bn.java, bn.dcsync, bn.raw)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			cmp.Report(b)
		})
	}
}
