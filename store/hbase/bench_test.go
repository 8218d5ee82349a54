package hbase

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/internal/benchratio"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

// BenchmarkHBase runs the dcsync benchmarks on the real HBase next to the raw client
// operations they are built from (the floor), in the same run:
//
//	Raw/CheckAndMutate+Delete  if-absent Put of D:L, then a row Delete (acquire+release)
//	Raw/Increment              one Increment with TTL (count-down)
//	Raw/Get                    one Get of one cell (count)
func BenchmarkHBase(b *testing.B) {
	c := shared(b)
	s := openStore(b)
	defer s.Close()
	// Count the acquires that found their cells hidden by a delete of the same
	// millisecond and started over.
	hidden := &countingHandler{msg: "hbase: acquired cells hidden by a delete marker; retrying"}
	s.log = slog.New(hidden)
	drivertest.Bench(b, s)
	b.Logf("acquires started over because a delete of the same millisecond hid their cells: %d", hidden.n.Load())

	ctx := context.Background()
	row := []byte("\x7fbench-raw-" + randHex(4))
	lockTable, latchTable := s.lockTable, s.latchTable
	b.Run("Raw/CheckAndMutate+Delete", func(b *testing.B) {
		drivertest.Timed(b, func() error {
			if _, _, err := c.CheckAndMutate(ctx, lockTable, row, hbaserpc.IfAbsent(famLock, qualLock),
				&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualLock, Value: lockMarker}}, TTL: time.Minute}); err != nil {
				return err
			}
			return c.Delete(ctx, lockTable, &hbaserpc.Delete{Row: row})
		})
	})
	q := []byte("count_dc1")
	b.Run("Raw/Increment", func(b *testing.B) {
		drivertest.Timed(b, func() error {
			_, err := c.Increment(ctx, latchTable, &hbaserpc.Increment{Row: row,
				Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: q, Amount: -1}}, TTL: time.Hour})
			return err
		})
	})
	b.Run("Raw/Get", func(b *testing.B) {
		drivertest.Timed(b, func() error {
			_, err := c.Get(ctx, latchTable, row, hbaserpc.Column{Family: famLatch, Qualifier: q})
			return err
		})
	})
}

// countingHandler counts the debug records with one message.
type countingHandler struct {
	msg string
	n   atomic.Int64
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// BenchmarkRatio runs each dcsync operation (through the lock and latch managers) and
// its raw counterpart alternately in one loop, so that the noise of a shared machine
// falls on both alike, and reports the ratio of their medians (ratio-p50) and of their
// means (ratio-mean) beside each side's median latency, and the calls to HBase each
// dcsync operation made (calls/op, counted by a wrapper of the client: noise cannot
// change it). ns/op is the pair's.
//
//	LockAcquireRelease  TryAcquire + Release     vs  if-absent CheckAndMutate + Delete
//	LatchCountDown      CountDown (DC)           vs  Increment with TTL
//	LatchCount          Count (DC)               vs  Get of one cell
func BenchmarkRatio(b *testing.B) {
	c := shared(b)
	s := openStore(b)
	defer s.Close()
	cnt := countCalls(s)
	ctx := context.Background()
	lm, err := lock.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	m, err := latch.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	lockTable, latchTable := s.lockTable, s.latchTable
	row := []byte("\x7fbench-raw-" + randHex(4))
	q := []byte("count_dc1")
	name := "ratio-" + randHex(4)
	d, err := m.CreateCountDown(ctx, name, 1<<40)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Increment(ctx, latchTable, &hbaserpc.Increment{Row: row,
		Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: q, Amount: 1 << 40}}, TTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	pairs := []struct {
		name        string
		dcsync, raw func() error
	}{
		{"LockAcquireRelease", func() error {
			l, err := lm.TryAcquire(ctx, name)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}, func() error {
			if _, _, err := c.CheckAndMutate(ctx, lockTable, row, hbaserpc.IfAbsent(famLock, qualLock),
				&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualLock, Value: lockMarker}}, TTL: time.Minute}); err != nil {
				return err
			}
			return c.Delete(ctx, lockTable, &hbaserpc.Delete{Row: row})
		}},
		{"LatchCountDown", func() error { _, err := d.CountDown(ctx); return err }, func() error {
			_, err := c.Increment(ctx, latchTable, &hbaserpc.Increment{Row: row,
				Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: q, Amount: -1}}, TTL: time.Hour})
			return err
		}},
		{"LatchCount", func() error { _, err := d.Count(ctx); return err }, func() error {
			_, err := c.Get(ctx, latchTable, row, hbaserpc.Column{Family: famLatch, Qualifier: q})
			return err
		}},
	}
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			// One untimed round first: the first acquire of a row also moves its
			// fencing counter, the first count-down of a latch reads it.
			if err := p.dcsync(); err != nil {
				b.Fatal(err)
			}
			cnt.take()
			benchratio.Run(b, benchratio.Default, nil, p.dcsync, p.raw)
			calls := cnt.take()
			b.ReportMetric(float64(sumCalls(calls))/float64(b.N), "calls/op")
			b.Logf("%s: calls %v over %d ops", p.name, calls, b.N)
		})
	}
}
