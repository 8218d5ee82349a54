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

// deleteRounds bounds DeleteQueue's rounds: a group added to the queue during a round
// (a new spec) makes it go again with the new spec.
const deleteRounds = 4

// DeleteQueue implements driver.QueueDeleter. Aerospike has no key-range scan; the
// queue's records are found by their keys where the spec determines them, and by one
// filtered scan where it does not:
//
//   - heads: one per storage partition (the spec's Partitions plus one dead-letter
//     partition per group), read in one batch for their Head;
//   - entries: every seq below each partition's Head, events, tombstones (which
//     TrimQueue keeps below the floor) and all, deleted by batch deletes of keys
//     (missing keys, trimmed ones, are no error);
//   - offsets: one per (group, storage partition);
//   - id records: a scan of QueueIDSet whose filter expression (on the server) keeps the
//     records whose qbQueue bin is the queue's name; the records found are deleted by
//     batch deletes of their digests;
//   - the spec, last, with a generation check: a DeleteQueue cut short leaves the queue,
//     with its spec, for another DeleteQueue to finish, and a group added meanwhile
//     makes it go round again.
//
// Deletes follow Config.DurableDelete. Cost: 1 read of the spec, 1 batch read of the
// heads, one batch command per queueBatchRecords keys of sum(Head) + G x (P+G) + P+G
// deletes, one scan of QueueIDSet (every queue's id records: the server reads them
// all; one scan call per node), one batch per queueBatchRecords id records found, and
// 1 delete.
//
// Id records written before this release carry no qbQueue bin and are not found; they
// end with the queue's dedup window (their TTL). The store forgets the queue's cached
// dedup window and heads; another Store (another process) that used the queue keeps
// them and would append to the deleted name: stop producers and consumers first.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	const op = "aerospike.DeleteQueue"
	if err := checkQueueName(name); err != nil {
		return err
	}
	for round := 0; round < deleteRounds; round++ {
		spec, gen, err := s.readSpec(ctx, op, name)
		if err != nil {
			s.forgetQueue(name, driver.QueueSpec{})
			return err
		}
		if err := s.deleteQueueRecords(ctx, op, spec); err != nil {
			return err
		}
		bdp := as.NewBatchDeletePolicy()
		bdp.Generation, bdp.GenerationPolicy = gen, as.EXPECT_GEN_EQUAL
		bdp.DurableDelete = s.cfg.DurableDelete
		rec := as.NewBatchDelete(bdp, s.specKey(name))
		if err := s.runBatch(ctx, op, true, []as.BatchRecordIfc{rec}, nil, types.GENERATION_ERROR, types.KEY_NOT_FOUND_ERROR); err != nil {
			return err
		}
		s.forgetQueue(name, spec)
		if rec.BatchRec().ResultCode != types.GENERATION_ERROR {
			return nil
		}
	}
	return driver.Errorf(dcsync.RetriesExhausted, op, "queue %q: its spec changed under %d tries to delete it", name, deleteRounds)
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
