package hbase

import (
	"context"
	"encoding/binary"

	"golang.org/x/sync/errgroup"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

var _ driver.QueueDeleter = (*Store)(nil)

// Bounds of a DeleteQueue's work (see DeleteQueue).
const (
	// deleteScans is how many prefix scans (and their deletes) run at once.
	deleteScans = 16
	// deleteBatch is the most row deletes sent in one MultiMutate.
	deleteBatch = 1000
	// deleteCaching is how many rows one scan RPC fetches.
	deleteCaching = 1000
)

// DeleteQueue implements driver.QueueDeleter. The queue's rows are found by prefix
// scans, as the layout places them (see the queue layout in queue.go):
//
//   - one scan per storage partition (the spec's Partitions plus one dead-letter
//     partition per group) of its prefix P: the head row (head, floor, trimmed
//     counter), every entry row (events, tombstones, trimmed marks) and every group's
//     offset row of the partition;
//   - one scan per salt value (256) of salt | len(queue) | queue | 0xFFFE | 'd': the
//     dedup rows, whose salt covers the event id and so spreads them over every
//     region;
//   - then the spec row, last: a DeleteQueue cut short leaves the queue, with its spec,
//     for another DeleteQueue to finish.
//
// Each row found is deleted whole, with a delete marker stamped with the newest cell
// timestamp the scan saw in it (hbaserpc.Delete.Timestamp), in MultiMutates of at most
// deleteBatch rows, deleteScans scans at a time. Stamping the marker so, rather than
// with the server's time, deletes exactly what was read: a write that lands later
// (an append racing the delete) stays visible, and a queue created again at once is
// not hidden by the marker, unless one of its writes is stamped in the same
// millisecond as the deleted row's newest cell. Cost: 1 Get, P+G+256 scans (each at
// least one RPC; a partition's scan returns its entries' payloads, one RPC per
// deleteCaching rows), one MultiMutate per deleteBatch rows found, and 1 Delete.
//
// The store forgets the queue's spec and offset cells it had cached; another Store
// (another process) that used the queue keeps its cached spec: its appends would write
// rows under the deleted name (partitions' heads restart at 0), which the next
// DeleteQueue after a CreateQueue of the name removes. Stop producers and consumers
// before deleting.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	const op = "hbase.DeleteQueue"
	if err := driver.ValidateID("queue", name); err != nil {
		return err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return err
	}
	d, ts, found, err := s.readSpec(ctx, db, table, name)
	if err != nil {
		return err
	}
	if !found {
		s.forgetQueue(name, driver.QueueSpec{})
		return driver.Errorf(dcsync.NotFound, op, "queue %q not found", name)
	}
	spec := d.spec(ts)
	var prefixes [][]byte
	for p := 0; p < spec.StoragePartitions(); p++ {
		prefixes = append(prefixes, partPrefix(name, p))
	}
	dedup := append(binary.BigEndian.AppendUint16(appendName(nil, name), 0xFFFE), 'd')
	for salt := 0; salt < 256; salt++ {
		prefixes = append(prefixes, append([]byte{byte(salt)}, dedup...))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(deleteScans)
	for _, prefix := range prefixes {
		g.Go(func() error { return deletePrefix(gctx, db, table, prefix) })
	}
	if err := g.Wait(); err != nil {
		return wrap(err, op)
	}
	// The spec, last: stamped with the version read, so that a spec written since (a
	// group added meanwhile) stays and the queue with it.
	if _, err := db.MultiMutate(ctx, table, []hbaserpc.Action{{Mutation: &hbaserpc.Delete{Row: specRow(name), Timestamp: ts}}}); err != nil {
		return wrap(err, op)
	}
	s.forgetQueue(name, spec)
	return nil
}

// deletePrefix deletes every row of table whose key starts with prefix, each stamped
// with its newest cell's timestamp, in MultiMutates of at most deleteBatch rows.
func deletePrefix(ctx context.Context, db queueOps, table string, prefix []byte) error {
	var acts []hbaserpc.Action
	flush := func() error {
		if len(acts) == 0 {
			return nil
		}
		_, err := db.MultiMutate(ctx, table, acts)
		acts = acts[:0]
		return err
	}
	err := db.ScanFunc(ctx, table, hbaserpc.Scan{StartRow: prefix, StopRow: prefixEnd(prefix), Caching: deleteCaching}, func(r hbaserpc.Row) error {
		var newest int64
		for _, c := range r.Cells {
			newest = max(newest, c.Timestamp)
		}
		acts = append(acts, hbaserpc.Action{Mutation: &hbaserpc.Delete{Row: r.Key, Timestamp: newest}})
		if len(acts) >= deleteBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// prefixEnd returns the first key after every key that starts with prefix (nil: the
// table's end).
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// forgetQueue drops what the store cached of queue name: its spec and the offset
// cells of spec's groups and partitions.
func (s *Store) forgetQueue(name string, spec driver.QueueSpec) {
	q := s.queue()
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.specs, name)
	for _, g := range spec.Groups {
		for p := 0; p < spec.StoragePartitions(); p++ {
			delete(q.seen, string(offsetRow(name, g, p)))
		}
	}
}
