package aerospike

import (
	"context"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueDeleter = (*Store)(nil)

// qbQueue is the bin of an id record that names its queue, so that DeleteQueue finds
// the queue's id records (their keys hold event ids, which nothing lists) by a scan of
// QueueIDSet filtered on it.
const qbQueue = "q"

// qbDeleting is the bin of a spec record that marks its queue as being deleted (see
// DeleteQueue): the deleting call's random id, a non-zero int.
const qbDeleting = "del"

// deleteRounds bounds DeleteQueue's (and CreateQueue's) rounds: a spec changed under
// the call (a group added, the queue deleted or created again) makes it read again.
const deleteRounds = 4

// DeleteQueue implements driver.QueueDeleter, in three steps:
//
//  1. The spec record is marked: bin qbDeleting ("del") set to a random id, by a write that
//     expects the generation read and whose filter expression checks the writer id and
//     creation time read (a queue deleted and created again meanwhile has others; a
//     spec changed meanwhile, a group added, is read again). From then on the queue
//     reads as deleted: every call that reads the spec (ReadQueueSpec, the first call
//     of a store that has not cached the queue, AddQueueGroup, ListQueues) finds no
//     queue, and a CreateQueue of the name finishes the delete before it creates.
//  2. The queue's records are deleted (below), the heads last, so that a delete cut
//     short before them finds the entries again below them.
//  3. The spec record is deleted, filtered on the mark (the exact id written in step 1):
//     a queue created again meanwhile is left alone.
//
// Aerospike has no key-range scan; the queue's records are found by their keys where
// the spec determines them, and by one filtered scan where it does not:
//
//   - heads: one per storage partition (the spec's Partitions plus one dead-letter
//     partition per group), read in one batch for their Head;
//   - entries: every seq below each partition's Head, events, tombstones (which
//     TrimQueue keeps below the floor) and all, deleted by batch deletes of keys
//     (missing keys, trimmed ones, are no error);
//   - offsets: one per (group, storage partition);
//   - id records: a scan of QueueIDSet whose filter expression (on the server) keeps the
//     records whose qbQueue bin is the queue's name; the records found are deleted by
//     batch deletes of their digests.
//
// A DeleteQueue cut short (an error, a crash, a cancelled context) anywhere leaves
// either the queue untouched (before the mark) or a queue that reads as deleted (the
// mark stands, some of its records are left): never a queue that reads as valid with
// part of its records gone. Another DeleteQueue of the name finishes the job (it finds
// the mark, deletes what is left and the spec, and returns nil), and so does a
// CreateQueue of the name, so a queue created again always starts empty: heads at 0, no
// offsets, no remembered ids. TestDeleteQueueCutAtEveryWrite cuts a delete before and
// after each of its writes in turn.
//
// Deletes follow Config.DurableDelete. Cost: 1 read of the spec, 1 write (the mark), 1
// batch read of the heads, one batch command per queueBatchRecords keys of sum(Head) +
// G x (P+G) + P+G deletes, one scan of QueueIDSet (every queue's id records: the server
// reads them all; one scan call per node), one batch per queueBatchRecords id records
// found, and 1 delete.
//
// Id records written before this release carry no qbQueue bin and are not found; they
// end with the queue's dedup window (their TTL). A release before this one reads a
// marked spec as the queue. The store forgets the queue's cached dedup window and
// heads; another Store (another process) that used the queue keeps them and would
// append to the deleted name: stop producers and consumers first.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	const op = "aerospike.DeleteQueue"
	if err := checkQueueName(name); err != nil {
		return err
	}
	seen := false // the queue existed, unmarked, when this call read it
	for round := 0; round < deleteRounds; round++ {
		rec, err := s.getRecord(ctx, op, s.specKey(name))
		if err != nil {
			return err
		}
		switch {
		case rec == nil && seen:
			// Marked (by this call, its reply lost, or another) and finished by another
			// call meanwhile.
			s.forgetQueue(name, driver.QueueSpec{})
			return nil
		case rec == nil:
			s.forgetQueue(name, driver.QueueSpec{})
			return driver.Errorf(dcsync.NotFound, op, "queue %q does not exist", name)
		case deletingMark(rec) != 0:
			// Ours (its reply lost), or a delete cut short: finish it.
			return s.finishDelete(ctx, op, name, rec)
		}
		seen = true
		mark := nonce()
		w, created := intBinOr0(rec, qbWriter), intBinOr0(rec, qbCreated)
		_, code, err := s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, as.TTLDontUpdate)
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.GenerationPolicy, wp.Generation = as.EXPECT_GEN_EQUAL, rec.Generation
			wp.FilterExpression = as.ExpAnd(
				as.ExpEq(binOr0(qbWriter), as.ExpIntVal(w)),
				as.ExpEq(binOr0(qbCreated), as.ExpIntVal(created)))
			return wp
		}, s.specKey(name), []*as.Operation{as.PutOp(as.NewBin(qbDeleting, mark))},
			types.GENERATION_ERROR, types.FILTERED_OUT, types.KEY_NOT_FOUND_ERROR)
		if err != nil {
			return err
		}
		if code == types.OK {
			rec.Bins[qbDeleting] = mark
			return s.finishDelete(ctx, op, name, rec)
		}
		// Changed meanwhile, or our own try applied with its reply lost: read again.
	}
	return driver.Errorf(dcsync.RetriesExhausted, op, "queue %q: its spec changed under %d tries to delete it", name, deleteRounds)
}

// deletingMark returns the deletion mark of spec record rec (see DeleteQueue); 0 when
// it has none.
func deletingMark(rec *as.Record) int64 { return intBinOr0(rec, qbDeleting) }

// intBinOr0 returns rec's integer bin, or 0 when it has none.
func intBinOr0(rec *as.Record, bin string) int64 {
	n, _ := intOf(rec.Bins[bin])
	return n
}

// finishDelete finishes the delete of queue name whose spec record rec holds a
// deletion mark (steps 2 and 3 of DeleteQueue): it deletes every record of the queue
// that the marked spec names, then the spec record, filtered on the mark (a queue
// created again meanwhile, after another call finished the delete, is left alone).
func (s *Store) finishDelete(ctx context.Context, op, name string, rec *as.Record) error {
	spec := specOf(name, rec.Bins)
	s.forgetQueue(name, spec)
	if err := s.deleteQueueRecords(ctx, op, spec); err != nil {
		return err
	}
	// The spec record, last: an operate whose only op deletes the record, filtered on
	// the exact mark (a try that lands late, after the name was created again, finds
	// another record: no mark, or another).
	mark := as.ExpEq(binOr0(qbDeleting), as.ExpIntVal(deletingMark(rec)))
	if _, _, err := s.write(ctx, op, func() *as.WritePolicy {
		wp := s.writePolicy(ctx, as.TTLDontUpdate)
		wp.DurableDelete = s.cfg.DurableDelete
		wp.FilterExpression = mark
		return wp
	}, s.specKey(name), []*as.Operation{as.DeleteOp()}, types.FILTERED_OUT, types.KEY_NOT_FOUND_ERROR); err != nil {
		return err
	}
	s.forgetQueue(name, spec)
	return nil
}

// deleteQueueRecords deletes every record of spec's queue but the spec.
func (s *Store) deleteQueueRecords(ctx context.Context, op string, spec driver.QueueSpec) error {
	name, sp := spec.Name, spec.StoragePartitions()
	ps := make([]int, sp)
	for p := range ps {
		ps[p] = p
	}
	bounds, err := s.readBounds(ctx, op, name, ps)
	if err != nil {
		return err
	}
	bdp := as.NewBatchDeletePolicy()
	bdp.DurableDelete = s.cfg.DurableDelete
	var recs []as.BatchRecordIfc
	flush := func(force bool) error {
		if len(recs) == 0 || (!force && len(recs) < 16*queueBatchRecords) {
			return nil
		}
		err := s.runBatch(ctx, op, true, recs, nil, types.KEY_NOT_FOUND_ERROR)
		recs = recs[:0]
		return err
	}
	add := func(k *as.Key) error {
		recs = append(recs, as.NewBatchDelete(bdp, k))
		return flush(false)
	}
	for p, b := range bounds {
		for seq := uint64(0); seq < b.Head; seq++ {
			if err := add(s.entryKey(name, p, seq)); err != nil {
				return err
			}
		}
		for _, g := range spec.Groups {
			if err := add(s.offsetKey(name, g, p)); err != nil {
				return err
			}
		}
	}
	var ids []*as.Key
	if err := s.scanQueueIDs(ctx, op, name, func(k *as.Key) { ids = append(ids, k) }); err != nil {
		return err
	}
	for _, k := range ids {
		if err := add(k); err != nil {
			return err
		}
	}
	// The heads last but the spec: a round cut short before them is found again by
	// the next (its entries are below the heads it reads).
	if err := flush(true); err != nil {
		return err
	}
	for p := range ps {
		recs = append(recs, as.NewBatchDelete(bdp, s.headKey(name, p)))
	}
	return flush(true)
}

// scanQueueIDs calls fn with the key of every id record of queue name: a scan of
// QueueIDSet, without bins, filtered on the server by qbQueue.
func (s *Store) scanQueueIDs(ctx context.Context, op, name string, fn func(*as.Key)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return driver.Errorf(dcsync.Connection, op, "the store is closed")
	}
	p := as.NewScanPolicy()
	p.IncludeBinData = false
	p.FilterExpression = as.ExpEq(as.ExpStringBin(qbQueue), as.ExpStringVal(name))
	if d, ok := ctx.Deadline(); ok {
		p.TotalTimeout = time.Until(d)
		if p.TotalTimeout <= 0 {
			return driver.Errorf(dcsync.Connection, op, "context done: %w", ctx.Err())
		}
	}
	rs, err := s.client.ScanAll(p, s.cfg.Namespace, QueueIDSet)
	if err != nil {
		return driver.Errorf(dcsync.Connection, op, "scan of %s: %w", QueueIDSet, err)
	}
	defer rs.Close()
	for {
		select {
		case <-ctx.Done():
			return driver.Errorf(dcsync.Connection, op, "context done: %w", ctx.Err())
		case res, ok := <-rs.Results():
			if !ok {
				return nil
			}
			if res.Err != nil {
				return driver.Errorf(dcsync.Connection, op, "scan of %s: %w", QueueIDSet, res.Err)
			}
			fn(res.Record.Key)
		}
	}
}

// forgetQueue drops what the store cached of queue name: its dedup window and the
// heads of spec's partitions.
func (s *Store) forgetQueue(name string, spec driver.QueueSpec) {
	c := s.qcache()
	c.specs.Delete(name)
	for p := 0; p < spec.StoragePartitions(); p++ {
		c.heads.Delete(partUser(name, p))
	}
}
