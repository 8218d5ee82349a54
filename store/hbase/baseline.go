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
	return &hbBaseline{s: s, row: row, qname: "dcsync-bench:" + prefix}, nil
}

type hbBaseline struct {
	s   *Store
	row []byte
	// The queue floor's rows: entry rows and an offset row of partition 0 of a queue
	// named for the baseline ("dcsync-bench:" + prefix, which has no spec), in the
	// queue table.
	qname string
	rows  uint64 // rows written
	pos   uint64 // the next row ReadRows reads
	wrote bool   // some queue row may exist
}

var qualBench = []byte("bench")

func (b *hbBaseline) Describe() map[string]string {
	return map[string]string{"lock": "check-and-put D:L absent + Delete", "add": "Increment", "get": "Get",
		"enqueue": "MultiMutate of Puts of the entry rows", "receive": "Scan of the entry rows + Put of an offset row"}
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
	if b.wrote {
		table, db, err := b.s.qready(ctx, "hbase.Baseline")
		if err != nil {
			return err
		}
		if err := deletePrefix(ctx, db, table, partPrefix(b.qname, 0)); err != nil {
			return wrap(err, "hbase.Baseline")
		}
	}
	if err := b.s.client.Delete(ctx, b.s.latchTable, &hbaserpc.Delete{Row: b.row}); err != nil {
		return wrap(err, "hbase.Baseline")
	}
	return wrap(b.s.client.Delete(ctx, b.s.lockTable, &hbaserpc.Delete{Row: b.row}), "hbase.Baseline")
}

var _ driver.QueueBaseline = (*hbBaseline)(nil)

// WriteRows implements driver.QueueBaseline: one MultiMutate of plain Puts of q:e in
// entry rows, as an append writes its events (without the reservation and the
// read-back it also makes).
func (b *hbBaseline) WriteRows(ctx context.Context, payloads [][]byte) error {
	table, db, err := b.s.qready(ctx, "hbase.Baseline")
	if err != nil {
		return err
	}
	prefix := partPrefix(b.qname, 0)
	acts := make([]hbaserpc.Action, len(payloads))
	for i, p := range payloads {
		acts[i] = hbaserpc.Action{Mutation: &hbaserpc.Put{Row: entryRow(prefix, b.rows+uint64(i)),
			Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualEntry, Value: p}}}}
	}
	b.wrote = true
	if _, err := db.MultiMutate(ctx, table, acts); err != nil {
		return wrap(err, "hbase.Baseline")
	}
	b.rows += uint64(len(payloads))
	return nil
}

// ReadRows implements driver.QueueBaseline: one Scan of n entry rows, as ReadQueue
// scans its entries (without the head row it reads alongside).
func (b *hbBaseline) ReadRows(ctx context.Context, n int) (int, error) {
	table, db, err := b.s.qready(ctx, "hbase.Baseline")
	if err != nil {
		return 0, err
	}
	if b.pos+uint64(n) > b.rows {
		b.pos = 0
	}
	from := b.pos
	b.pos = min(from+uint64(n), b.rows)
	prefix := partPrefix(b.qname, 0)
	got := 0
	err = db.ScanFunc(ctx, table, hbaserpc.Scan{StartRow: entryRow(prefix, from), StopRow: entryRow(prefix, from+uint64(n)), Limit: n, Caching: n},
		func(hbaserpc.Row) error { got++; return nil })
	return got, wrap(err, "hbase.Baseline")
}

// CommitOffset implements driver.QueueBaseline: one Put of q:o in an offset row.
func (b *hbBaseline) CommitOffset(ctx context.Context, next int64) error {
	table, db, err := b.s.qready(ctx, "hbase.Baseline")
	if err != nil {
		return err
	}
	b.wrote = true
	_, err = db.MultiMutate(ctx, table, []hbaserpc.Action{{Mutation: &hbaserpc.Put{Row: offsetRow(b.qname, "bench", 0),
		Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualOffset, Value: be64(uint64(next))}}}}})
	return wrap(err, "hbase.Baseline")
}
