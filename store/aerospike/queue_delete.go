package aerospike

import (
	"context"
	"errors"
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
//     expects the generation read and whose filter expression checks the writer id,
//     creation time and incarnation id read (a queue deleted and created again
//     meanwhile has others; a spec changed meanwhile, a group added, is read again).
//     From then on the queue reads as deleted: every call that reads the spec
//     (ReadQueueSpec, the first call of a store that has not cached the queue,
//     AddQueueGroup, ListQueues) finds no queue, and a CreateQueue of the name finishes
//     the delete before it creates.
//  2. The queue's records are deleted (below), the heads last, so that a delete cut
//     short before them finds the entries again below them. Every delete is filtered
//     on the record belonging to the incarnation being deleted (incIs, below).
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
// The batch deletes of step 2 are sent again after a try in doubt (runBatch), and a
// try may land late: after this delete was finished (by this call, another DeleteQueue
// or a CreateQueue) and the name was created again and written to; so may the first
// try of a slow call that another finished. Unconditioned, it
// deleted the new queue's records of the same keys: its events, its heads (reset to
// 0: seqs used again), its offsets and its ids. So each delete carries a filter
// expression, incIs: the record's incarnation bin (qbInc) is the marked spec's, or
// the record has none. CreateQueue draws a random incarnation id per queue, and every
// write that may create a head, entry, offset or id record writes it there (incOp):
// a late delete finds another id in every record of a queue created again and
// changes nothing (TestDeleteQueueLateBatchKeepsNewQueue;
// TestQueueRecordsCarryIncarnation checks that every kind of record carries the id).
// The ids are compared for equality: no clock is involved. Records without the bin
// (written before this release, or of a queue created before it, whose spec has none:
// filter value 0) are deleted as before; only a process of an older release writing
// to a queue created again writes records a late delete can still hit.
//
// A record filtered out carries another incarnation: one that a process whose cache
// held a queue deleted earlier wrote under the name (the rule is to stop producers and
// consumers first). deleteRecords deletes those too, filtered on their own id, once it
// has checked that the mark still stands (no queue can have been created again then,
// so those ids are of earlier queues, never of a later one): a late try of that delete
// cannot touch a queue created again either
// (TestDeleteQueueDeletesRecordsWithoutIncarnation). A mark gone means that another
// call finished the delete and the records filtered out may be a new queue's: the
// call stops there and returns nil (TestDeleteQueueSlowCallKeepsNewQueue: a call
// stopped after its heads read while the queue is deleted, created again and filled).
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
// found, and 1 delete. The incarnation filter costs no round trip (the server
// evaluates it on the record it deletes); records of another incarnation, when there
// are any, cost 1 batch read, 1 get and 1 batch delete more per batch command.
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
		w, created, inc := intBinOr0(rec, qbWriter), intBinOr0(rec, qbCreated), intBinOr0(rec, qbInc)
		_, code, err := s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, as.TTLDontUpdate)
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.GenerationPolicy, wp.Generation = as.EXPECT_GEN_EQUAL, rec.Generation
			wp.FilterExpression = as.ExpAnd(
				as.ExpEq(binOr0(qbWriter), as.ExpIntVal(w)),
				as.ExpEq(binOr0(qbCreated), as.ExpIntVal(created)),
				as.ExpEq(binOr0(qbInc), as.ExpIntVal(inc)))
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
// that the marked spec names, filtered on the spec's incarnation, then the spec
// record, filtered on the mark (a queue created again meanwhile, after another call
// finished the delete, is left alone).
func (s *Store) finishDelete(ctx context.Context, op, name string, rec *as.Record) error {
	spec := specOf(name, rec.Bins)
	s.forgetQueue(name, spec)
	if err := s.deleteQueueRecords(ctx, op, spec, intBinOr0(rec, qbInc), deletingMark(rec)); errors.Is(err, errMarkGone) {
		// Finished by another call (a DeleteQueue, or a CreateQueue of the name): what
		// is under the name now may be a queue created again.
		return nil
	} else if err != nil {
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

// errMarkGone reports that the deletion mark a call works under no longer stands:
// another call finished the delete (see deleteRecords).
var errMarkGone = errors.New("aerospike: the queue's deletion mark is gone")

// deleteQueueRecords deletes every record of spec's queue but the spec, whose spec
// record holds incarnation inc and deletion mark mark, by deleteRecords.
func (s *Store) deleteQueueRecords(ctx context.Context, op string, spec driver.QueueSpec, inc, mark int64) error {
	name, sp := spec.Name, spec.StoragePartitions()
	ps := make([]int, sp)
	for p := range ps {
		ps[p] = p
	}
	bounds, err := s.readBounds(ctx, op, name, ps)
	if err != nil {
		return err
	}
	if err := queueHook(name, "delete-bounds-read"); err != nil {
		return err
	}
	bdp := as.NewBatchDeletePolicy()
	bdp.DurableDelete = s.cfg.DurableDelete
	bdp.FilterExpression = incIs(inc)
	var recs []as.BatchRecordIfc
	flush := func(force bool) error {
		if len(recs) == 0 || (!force && len(recs) < 16*queueBatchRecords) {
			return nil
		}
		err := s.deleteRecords(ctx, op, name, recs, mark)
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

// deleteRecords sends recs, batch deletes filtered on the incarnation of the queue
// being deleted (incIs), and then deletes those it filtered out, records of other
// incarnations, when they are older: each filtered record's incarnation is read (one
// batch), then the spec record (one get) must still hold mark, this delete's deletion
// mark. While it stands no queue can have been created again under the name (a
// CreateQueue needs the spec record gone; the mark, a random id, never comes back),
// so the incarnations read are of queues deleted before, whose records a process with
// a stale cache wrote under the name: each is deleted filtered on the exact id read,
// which no later incarnation has (a try of it that lands late changes nothing of a
// queue created again). A mark gone returns errMarkGone, deleting nothing more: the
// delete was finished by another call and the records filtered out may be a new
// queue's. Without records of other incarnations (the rule) this costs nothing more.
func (s *Store) deleteRecords(ctx context.Context, op, name string, recs []as.BatchRecordIfc, mark int64) error {
	if err := s.runBatch(ctx, op, true, recs, nil, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT); err != nil {
		return err
	}
	var reads []as.BatchRecordIfc
	for _, r := range recs {
		if br := r.BatchRec(); br.ResultCode == types.FILTERED_OUT {
			reads = append(reads, as.NewBatchRead(nil, br.Key, []string{qbInc}))
		}
	}
	if len(reads) == 0 {
		return nil
	}
	if err := s.runBatch(ctx, op, false, reads, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return err
	}
	rec, err := s.getRecord(ctx, op, s.specKey(name))
	if err != nil {
		return err
	}
	if rec == nil || deletingMark(rec) != mark {
		return errMarkGone
	}
	policies := map[int64]*as.BatchDeletePolicy{}
	var dels []as.BatchRecordIfc
	for _, r := range reads {
		br := r.BatchRec()
		if br.ResultCode != types.OK || br.Record == nil {
			continue // deleted meanwhile
		}
		inc := intBinOr0(br.Record, qbInc)
		p, ok := policies[inc]
		if !ok {
			p = as.NewBatchDeletePolicy()
			p.DurableDelete = s.cfg.DurableDelete
			p.FilterExpression = incIs(inc)
			policies[inc] = p
		}
		dels = append(dels, as.NewBatchDelete(p, br.Key))
	}
	s.log.Debug("aerospike: deleting records an earlier incarnation of the queue left", "queue", name, "records", len(dels))
	return s.runBatch(ctx, op, true, dels, nil, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT)
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

// forgetQueue drops what the store cached of queue name: its dedup window, its
// incarnation id and the heads of spec's partitions.
func (s *Store) forgetQueue(name string, spec driver.QueueSpec) {
	c := s.qcache()
	c.specs.Delete(name)
	c.incs.Delete(name)
	for p := 0; p < spec.StoragePartitions(); p++ {
		c.heads.Delete(partUser(name, p))
	}
}
