package hbase

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/internal/hbaserpc"
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
