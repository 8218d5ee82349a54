package rwlock_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
)

// BenchmarkRatio runs a read and a write lock round trip each beside a raw lock round
// trip of the store (AcquireLock + ReleaseLock), alternately in one loop, so that the
// noise of a shared machine falls on both alike; it reports the ratio of their medians
// (ratio-p50) and means (ratio-mean), each side's median, and the store calls of each
// side per operation (counted by a wrapper: noise cannot change them). On memory and
// SQLite (a file in a temporary directory).
//
//	Read   AcquireRead + Release    vs  AcquireLock + ReleaseLock
//	Write  AcquireWrite + Release   vs  AcquireLock + ReleaseLock
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
		b.Run(st.name, func(b *testing.B) {
			raw := st.open(b)
			defer raw.Close()
			if _, err := driver.Registers(raw, "bench"); err != nil {
				b.Skip(err)
			}
			c := &counting{Store: raw}
			ctx := context.Background()
			m, err := rwlock.New(c, "bench", "dc1", rwlock.WithTTL(time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			key := dcsync.Key{Level: dcsync.DC, Client: "bench", Farm: "dc1", Name: "raw"}
			rawOp := func() error {
				if _, err := c.AcquireLock(ctx, key, "bench-owner", time.Minute); err != nil {
					return err
				}
				return c.ReleaseLock(ctx, key, "bench-owner")
			}
			pairs := []struct {
				name string
				op   func() error
			}{
				{"Read", func() error {
					l, err := m.AcquireRead(ctx, "doc")
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}},
				{"Write", func() error {
					l, err := m.AcquireWrite(ctx, "doc")
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}},
			}
			for _, p := range pairs {
				b.Run(p.name, func(b *testing.B) {
					if err := p.op(); err != nil { // creates the register, reads M once
						b.Fatal(err)
					}
					ld := make([]time.Duration, 0, b.N)
					lr := make([]time.Duration, 0, b.N)
					var calls, rawCalls int64
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						n0 := c.calls.Load()
						t0 := time.Now()
						if err := p.op(); err != nil {
							b.Fatal(err)
						}
						t1 := time.Now()
						n1 := c.calls.Load()
						if err := rawOp(); err != nil {
							b.Fatal(err)
						}
						ld, lr = append(ld, t1.Sub(t0)), append(lr, time.Since(t1))
						calls += n1 - n0
						rawCalls += c.calls.Load() - n1
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
					b.ReportMetric(med(ld), "rwlock-p50-ns")
					b.ReportMetric(med(lr), "raw-p50-ns")
					b.ReportMetric(med(ld)/med(lr), "ratio-p50")
					b.ReportMetric(mean(ld)/mean(lr), "ratio-mean")
					b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
					b.ReportMetric(float64(rawCalls)/float64(b.N), "raw-calls/op")
				})
			}
		})
	}
}
