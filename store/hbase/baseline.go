package hbase

import (
	"context"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

var _ driver.Baseliner = (*Store)(nil)

// Baseline returns the raw calls the Java libraries make, on rows of the baseline's own
// (keys starting "\x7fdcsync-bench:", which no salted dcsync or Java row has) in the
// store's lock and latch tables: the Java lock store's check-and-put "D:L absent" and
// its row Delete (HBaseStore.java:78-82 and its release), and the Java latch's Increment and Get of
// a counter cell. Close deletes both rows.
func (s *Store) Baseline(ctx context.Context, prefix string) (driver.Baseline, error) {
	const op = "hbase.Baseline"
	if err := driver.ValidateID("baseline prefix", prefix); err != nil {
		return nil, err
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if err := s.ready(ctx, op, &s.locks); err != nil {
		return nil, err
	}
	if err := s.ready(ctx, op, &s.latches); err != nil {
		return nil, err
	}
	row := []byte("\x7fdcsync-bench:" + prefix)
	return &hbBaseline{s: s, row: row}, nil
}

type hbBaseline struct {
	s   *Store
	row []byte
}

var qualBench = []byte("bench")

func (b *hbBaseline) Describe() map[string]string {
	return map[string]string{"lock": "check-and-put D:L absent + Delete", "add": "Increment", "get": "Get"}
}

func (b *hbBaseline) LockPair(ctx context.Context) error {
	const op = "hbase.Baseline"
	put := &hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualLock, Value: lockMarker}}, TTL: time.Minute}
	ok, _, err := b.s.db.CheckAndMutate(ctx, b.s.lockTable, b.row, hbaserpc.IfAbsent(famLock, qualLock), put)
	if err != nil {
		return wrap(err, op)
	}
	if !ok {
		return driver.Errorf(dcsync.Internal, op, "baseline lock row is held")
	}
	return wrap(b.s.client.Delete(ctx, b.s.lockTable, &hbaserpc.Delete{Row: b.row}), op)
}

func (b *hbBaseline) Add(ctx context.Context, delta int64) error {
	_, err := b.s.db.Increment(ctx, b.s.latchTable, &hbaserpc.Increment{Row: b.row,
		Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: qualBench, Amount: delta}}})
	return wrap(err, "hbase.Baseline")
}

func (b *hbBaseline) Get(ctx context.Context) error {
	_, err := b.s.db.Get(ctx, b.s.latchTable, b.row, hbaserpc.Column{Family: famLatch})
	return wrap(err, "hbase.Baseline")
}

func (b *hbBaseline) Close(ctx context.Context) error {
	if err := b.s.client.Delete(ctx, b.s.latchTable, &hbaserpc.Delete{Row: b.row}); err != nil {
		return wrap(err, "hbase.Baseline")
	}
	return wrap(b.s.client.Delete(ctx, b.s.lockTable, &hbaserpc.Delete{Row: b.row}), "hbase.Baseline")
}
