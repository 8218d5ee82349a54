package drivertest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

// Bench runs dcsync's benchmarks on s, each beside the store operation it wraps:
//
//	LockAcquireRelease/dcsync  lock.Manager TryAcquire + Lock.Release
//	LockAcquireRelease/store   Store.AcquireLock + Store.ReleaseLock
//	LatchCountDown/dcsync      CountDownLatch.CountDown
//	LatchCountDown/store       Store.AddLatch(-1)
//	LatchCount/dcsync          CountDownLatch.Count
//	LatchCount/store           Store.ReadLatches (one key)
//	LatchWaitWake/dcsync       Wait on a latch counted to zero by another process
//	                           (straight on the store): wake-up latency, poll 10ms
//
// Each reports p50-ns and p99-ns besides ns/op. A store's tests add their own raw
// baseline (a SQL transaction, a client call) so the ratio to the floor shows too.
func Bench(b *testing.B, s driver.Store) {
	ctx := context.Background()
	lm, err := lock.New(s, client, "dc1", lock.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	name := "bench-" + time.Now().Format("150405.000000000")
	key := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: name}

	b.Run("LockAcquireRelease/dcsync", func(b *testing.B) {
		Timed(b, func() error {
			l, err := lm.TryAcquire(ctx, name)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	b.Run("LockAcquireRelease/store", func(b *testing.B) {
		Timed(b, func() error {
			if _, err := s.AcquireLock(ctx, key, "bench-owner", time.Minute); err != nil {
				return err
			}
			return s.ReleaseLock(ctx, key, "bench-owner")
		})
	})

	m, err := latch.New(s, client, "dc1", latch.WithLogger(quiet), latch.WithPollInterval(10*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	l, err := m.CreateCountDown(ctx, name, 1<<40)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("LatchCountDown/dcsync", func(b *testing.B) {
		Timed(b, func() error { _, err := l.CountDown(ctx); return err })
	})
	b.Run("LatchCountDown/store", func(b *testing.B) {
		Timed(b, func() error { _, err := s.AddLatch(ctx, key, -1); return err })
	})
	b.Run("LatchCount/dcsync", func(b *testing.B) {
		Timed(b, func() error { _, err := l.Count(ctx); return err })
	})
	keys := []dcsync.Key{key}
	b.Run("LatchCount/store", func(b *testing.B) {
		Timed(b, func() error { _, err := s.ReadLatches(ctx, keys); return err })
	})
	b.Run("LatchWaitWake/dcsync", func(b *testing.B) {
		var lat []time.Duration
		for i := 0; i < b.N; i++ {
			w, err := m.CreateCountDown(ctx, name+"-w"+time.Now().Format("150405.000000000"), 1)
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan time.Time, 1)
			go func() {
				if err := w.Wait(ctx); err != nil {
					b.Error(err)
				}
				done <- time.Now()
			}()
			time.Sleep(15 * time.Millisecond) // let the watcher take the waiter in
			start := time.Now()
			if _, err := s.AddLatch(ctx, w.Key(), -1); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, (<-done).Sub(start))
		}
		report(b, lat)
	})
}

// Timed runs op b.N times and reports p50-ns and p99-ns beside ns/op.
func Timed(b *testing.B, op func() error) {
	b.Helper()
	b.ReportAllocs()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	report(b, lat)
}

func report(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
