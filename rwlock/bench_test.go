package rwlock_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/benchratio"
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
					benchratio.Run(b, benchratio.Names{P50: "rwlock-p50-ns", RawP50: "raw-p50-ns", Calls: "calls/op", RawCalls: "raw-calls/op"},
						c.calls.Load, p.op, rawOp)
				})
			}
		})
	}
}
