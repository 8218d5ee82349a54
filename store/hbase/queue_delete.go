package hbase

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"

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

// DeleteQueue implements driver.QueueDeleter, in three steps:
//
//  1. The spec cell (q:s) is replaced by the queue's deletion mark: deletingMark, then
//     the spec's bytes (a check-and-mutate "q:s holds exactly the spec read": a spec
//     changed meanwhile, a group added, is read again). From then on the queue reads as
//     deleted: every call that reads the spec (ReadQueueSpec, the first call of a store
//     that has not cached it, AddQueueGroup, ListQueues) finds no queue, and a
//     CreateQueue of the name finishes the delete before it creates (see
//     finishDelete). A release before this one reads the mark as a bad spec
//     (Internal): never as a queue.
//  2. The queue's rows are deleted, found by prefix scans as the layout places them
//     (see the queue layout in queue.go): one scan per storage partition (the spec's
//     Partitions plus one dead-letter partition per group) of its prefix P (the head
//     row, every entry row and every group's offset row of the partition), and one
//     scan per salt value (256) of salt | len(queue) | queue | 0xFFFE | 'd' (the
//     dedup rows, whose salt covers the event id and so spreads them over every
//     region).
//  3. The mark is removed (a check-and-mutate "q:s holds exactly the mark").
//
// A DeleteQueue cut short (an error, a crash, a cancelled context) anywhere leaves
// either the queue untouched (before the mark) or a queue that reads as deleted (the
// mark stands, some of its rows are left): never a queue that reads as valid with part
// of its rows gone. Another DeleteQueue of the name finishes the job (it finds the
// mark, deletes what is left and removes the mark, and returns nil), and so does a
// CreateQueue of the name, so a queue created again always starts empty: heads at 0,
// no offsets, no remembered ids. TestDeleteQueueCutAtEveryWrite cuts a delete before
// and after each of its writes in turn.
//
// Each row found is deleted whole, with a delete marker stamped with the newest cell
// timestamp the scan saw in it (hbaserpc.Delete.Timestamp), in MultiMutates of at most
// deleteBatch rows, deleteScans scans at a time; the mark is deleted at its own
// timestamp. Stamping the markers so, rather than with the server's time, deletes
// exactly what was read: a write that lands later (an append racing the delete) stays
// visible, and a queue created again at once is not hidden by the markers, unless one
// of its writes is stamped in the same millisecond as the deleted row's newest cell.
// Cost: 3 Gets (the spec, the mark, the mark again before removing it), 1
// check-and-mutate to set the mark, P+G+256 scans (each at least one RPC; a
// partition's scan returns its entries' payloads, one RPC per deleteCaching rows), one
// MultiMutate per deleteBatch rows found, and 1 check-and-mutate to remove the mark.
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
	var doubt error
	for try := 0; try < 4*maxTries; try++ {
		v, _, found, err := readSpecCell(ctx, db, table, name)
		if err != nil {
			return err
		}
		switch {
		case !found && doubt != nil:
			// Our mark was set and the delete finished by another call meanwhile.
			s.forgetQueue(name, driver.QueueSpec{})
			return nil
		case !found:
			s.forgetQueue(name, driver.QueueSpec{})
			return driver.Errorf(dcsync.NotFound, op, "queue %q not found", name)
		case isDeleting(v):
			// Ours, or a delete cut short: finish it.
			_, err := s.finishDelete(ctx, db, table, name)
			return err
		}
		if _, err := decodeSpec(op, name, v); err != nil {
			return err
		}
		// Set the mark; whether it was applied, refused (the spec changed meanwhile: a
		// group added) or in doubt, the next read of the spec cell tells.
		_, _, err = db.CheckAndMutate(ctx, table, specRow(name), hbaserpc.IfEquals(famQueue, qualSpec, v),
			&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualSpec, Value: deletingValue(v)}}})
		if err != nil {
			if !inDoubt(err) {
				return wrap(err, op)
			}
			doubt = err
			s.log.Debug("hbase: queue delete mark in doubt; reading the spec again", "queue", name, "err", err)
		}
	}
	if doubt != nil {
		return wrap(doubt, op)
	}
	return driver.Errorf(dcsync.RetriesExhausted, op, "queue %q: the spec kept changing", name)
}

// deletingMark is the first byte of the value of a spec cell (q:s) that marks its queue
// as being deleted (see DeleteQueue): a spec is JSON and starts with '{'.
const deletingMark = 0x00

// isDeleting reports whether v, a spec cell's value, is a deletion mark.
func isDeleting(v []byte) bool { return len(v) > 0 && v[0] == deletingMark }

// deletingValue returns the deletion mark of a queue whose spec cell holds spec.
func deletingValue(spec []byte) []byte { return append([]byte{deletingMark}, spec...) }

// readSpecCell reads the spec cell of queue name as stored: a spec, a deletion mark
// (isDeleting), or nothing.
func readSpecCell(ctx context.Context, db queueOps, table, name string) ([]byte, int64, bool, error) {
	cells, err := db.Get(ctx, table, specRow(name), hbaserpc.Column{Family: famQueue, Qualifier: qualSpec})
	if err != nil {
		return nil, 0, false, wrap(err, "hbase.ReadQueueSpec")
	}
	v, ts, ok := cellValue(cells, qualSpec)
	return v, ts, ok, nil
}

// decodeSpec decodes a spec cell's value v (not a deletion mark) of queue name.
func decodeSpec(op, name string, v []byte) (specDoc, error) {
	var d specDoc
	if err := json.Unmarshal(v, &d); err != nil {
		return specDoc{}, driver.Errorf(dcsync.Internal, op, "queue %q: bad spec: %v", name, err)
	}
	if d.Name != name {
		return specDoc{}, driver.Errorf(dcsync.Internal, op, "spec row of queue %q holds queue %q", name, d.Name)
	}
	return d, nil
}

// finishDelete finishes the delete of queue name whose spec cell holds a deletion mark
// (steps 2 and 3 of DeleteQueue): it deletes every row of the queue the mark's spec
// names, then removes the mark. It reports false, doing nothing, when the spec cell
// holds no mark. A mark replaced meanwhile (another call finished the delete, and the
// name was created again) is left alone.
func (s *Store) finishDelete(ctx context.Context, db queueOps, table, name string) (bool, error) {
	const op = "hbase.DeleteQueue"
	v, ts, found, err := readSpecCell(ctx, db, table, name)
	if err != nil || !found || !isDeleting(v) {
		return false, err
	}
	d, err := decodeSpec(op, name, v[1:])
	if err != nil {
		return false, err
	}
	spec := d.spec(ts)
	s.forgetQueue(name, spec)
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
		return false, wrap(err, op)
	}
	// The mark, last, at its own timestamp: a spec written after it stays.
	row := specRow(name)
	for try := 0; ; try++ {
		_, _, err := db.CheckAndMutate(ctx, table, row, hbaserpc.IfEquals(famQueue, qualSpec, v), &hbaserpc.Delete{Row: row, Timestamp: ts})
		if err == nil {
			break // removed, or replaced by another call meanwhile
		}
		if !inDoubt(err) || try >= maxTries {
			return false, wrap(err, op)
		}
		// In doubt: sent again while the mark stands (the same delete marker again).
		now, _, found, rerr := readSpecCell(ctx, db, table, name)
		if rerr != nil {
			return false, rerr
		}
		if !found || !bytes.Equal(now, v) {
			break
		}
	}
	s.forgetQueue(name, spec)
	return true, nil
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
