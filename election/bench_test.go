package election_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/internal/benchratio"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
)

// counting counts the store calls that reach a store keeping registers.
type counting struct {
	driver.Store
	regs  driver.RegisterStore
	calls atomic.Int64
}

func (c *counting) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	c.calls.Add(1)
	return c.Store.AcquireLock(ctx, k, owner, ttl)
}

func (c *counting) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	c.calls.Add(1)
	return c.Store.ReleaseLock(ctx, k, owner)
}

func (c *counting) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	c.calls.Add(1)
	return c.regs.SwapRegister(ctx, k, gen, value)
}

func (c *counting) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	c.calls.Add(1)
	return c.regs.ReadRegisters(ctx, keys)
}

// BenchmarkRatio runs Campaign + Resign of an uncontended election and the raw store
// lock acquire + release (Store.AcquireLock + Store.ReleaseLock) alternately in one
// loop, so that a noisy machine's noise falls on both alike, and reports the ratio of
// their medians (ratio-p50) and means (ratio-mean), each side's median, and the store
// calls of each side per op (exact: counted):
//
//	go test -run '^$' -bench BenchmarkRatio -benchtime 500x -count 5 ./election/
func BenchmarkRatio(b *testing.B) {
	stores := map[string]func(b *testing.B) driver.Store{
		"memory": func(b *testing.B) driver.Store { return memory.New() },
		"sqlite": func(b *testing.B) driver.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
	}
	for _, name := range []string{"memory", "sqlite"} {
		b.Run(name+"/CampaignResign", func(b *testing.B) {
			s := stores[name](b)
			defer s.Close()
			regs, err := driver.Registers(s, "bench")
			if err != nil {
				b.Skip(err)
			}
			c := &counting{Store: s, regs: regs}
			m, err := election.New(c, "bench", "dc1", election.WithTTL(time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			key := dcsync.Key{Level: dcsync.DC, Client: "bench", Farm: "dc1", Name: "raw-lock"}
			benchratio.Run(b, benchratio.Default, c.calls.Load, func() error {
				l, err := m.Campaign(ctx, "bench", "v")
				if err != nil {
					return err
				}
				return l.Resign(ctx)
			}, func() error {
				if _, err := c.AcquireLock(ctx, key, "bench-owner", time.Minute); err != nil {
					return err
				}
				return c.ReleaseLock(ctx, key, "bench-owner")
			})
		})
	}
}
