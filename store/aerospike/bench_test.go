package aerospike_test

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/aerospike"
)

// Each benchmark runs dcsync's operation and the raw client operation it wraps (what the
// Java library sends) against one in-process server, in the same run, and reports
// p50/p99 latency next to ns/op. Allocations include the in-process server's.

var seq atomic.Int64

// uniq returns a fresh name suffix: runs of one benchmark may share a server.
func uniq() string { return strconv.FormatInt(seq.Add(1), 10) }

type latencies []time.Duration

func (l *latencies) time(f func()) {
	t := time.Now()
	f()
	*l = append(*l, time.Since(t))
}

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	at := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))].Nanoseconds()) }
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
}

func benchSetup(b *testing.B) (*as.Client, *aerospike.Store) {
	srv := startServer(b)
	c := dial(b, srv.Addr())
	return c, newStore(b, c, aerospike.Config{})
}

func BenchmarkLockAcquireRelease(b *testing.B) {
	c, s := benchSetup(b)
	ctx := context.Background()
	b.Run("dcsync", func(b *testing.B) {
		m, err := lock.New(s, "bench", "dc1")
		if err != nil {
			b.Fatal(err)
		}
		name := "lock-" + uniq()
		lat := make(latencies, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lat.time(func() {
				l, err := m.TryAcquire(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			})
		}
		b.StopTimer()
		lat.report(b)
	})
	b.Run("raw", func(b *testing.B) {
		k, _ := as.NewKey("test", "DC#dc1#dlm", "bench#rawlock-"+uniq())
		put := as.NewWritePolicy(0, 60)
		put.GenerationPolicy = as.EXPECT_GEN_EQUAL
		del := as.NewWritePolicy(0, 0)
		lat := make(latencies, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lat.time(func() {
				if err := c.Put(put, k, as.BinMap{"dc1##data": 1, "dc1##uat": time.Now().UnixMilli()}); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Delete(del, k); err != nil {
					b.Fatal(err)
				}
			})
		}
		b.StopTimer()
		lat.report(b)
	})
}

func BenchmarkLatchCountDown(b *testing.B) {
	c, s := benchSetup(b)
	ctx := context.Background()
	b.Run("dcsync", func(b *testing.B) {
		m, _ := latch.New(s, "bench", "dc1")
		l, err := m.CreateCountDown(ctx, "cd-"+uniq(), 1<<40)
		if err != nil {
			b.Fatal(err)
		}
		lat := make(latencies, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lat.time(func() {
				if _, err := l.CountDown(ctx); err != nil {
					b.Fatal(err)
				}
			})
		}
		b.StopTimer()
		lat.report(b)
	})
	b.Run("raw", func(b *testing.B) {
		k, _ := as.NewKey("test", "D_LTCH#distributed_latch", "D_LTCH#bench#raw-cd-"+uniq())
		if err := javaCreateLatch(c, k, "dc1", 1<<40); err != nil {
			b.Fatal(err)
		}
		wp := as.NewWritePolicy(0, 60)
		wp.RecordExistsAction = as.UPDATE_ONLY
		lat := make(latencies, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lat.time(func() {
				if _, err := c.Operate(wp, k, as.AddOp(as.NewBin("count#dc1", -1))); err != nil {
					b.Fatal(err)
				}
			})
		}
		b.StopTimer()
		lat.report(b)
	})
}

func BenchmarkLatchCount(b *testing.B) {
	c, s := benchSetup(b)
	ctx := context.Background()
	b.Run("dcsync", func(b *testing.B) {
		m, _ := latch.New(s, "bench", "dc1")
		l, err := m.CreateCountDown(ctx, "count-"+uniq(), 5)
		if err != nil {
			b.Fatal(err)
		}
		lat := make(latencies, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lat.time(func() {
				if n, err := l.Count(ctx); err != nil || n != 5 {
					b.Fatal(n, err)
				}
			})
		}
		b.StopTimer()
		lat.report(b)
	})
	b.Run("raw", func(b *testing.B) {
		k, _ := as.NewKey("test", "D_LTCH#distributed_latch", "D_LTCH#bench#raw-count-"+uniq())
		if err := javaCreateLatch(c, k, "dc1", 5); err != nil {
			b.Fatal(err)
		}
		lat := make(latencies, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lat.time(func() {
				if _, err := c.Get(nil, k, "count#dc1"); err != nil {
					b.Fatal(err)
				}
			})
		}
		b.StopTimer()
		lat.report(b)
	})
}
