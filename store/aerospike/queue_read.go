package aerospike

import (
	"context"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// readBounds reads the head records of partitions ps in one batch (a missing record
// is a partition never appended to: zero bounds).
func (s *Store) readBounds(ctx context.Context, op, name string, ps []int) ([]driver.QueueBounds, error) {
	recs := make([]as.BatchRecordIfc, len(ps))
	for i, p := range ps {
		recs[i] = as.NewBatchRead(nil, s.headKey(name, p), []string{qbHead, qbFloor})
	}
	if err := s.runBatch(ctx, op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, err
	}
	out := make([]driver.QueueBounds, len(ps))
	for i := range ps {
		br := recs[i].BatchRec()
		if br.ResultCode == types.OK && br.Record != nil {
			out[i] = driver.QueueBounds{Head: uintOf(br.Record.Bins[qbHead]), Floor: uintOf(br.Record.Bins[qbFloor])}
		}
	}
	return out, nil
}

// QueueBounds implements driver.QueueStore: one batch read of the head records.
func (s *Store) QueueBounds(ctx context.Context, name string, ps []int) ([]driver.QueueBounds, error) {
	const op = "aerospike.QueueBounds"
	if err := checkQueueName(name); err != nil {
		return nil, err
	}
	for _, p := range ps {
		if err := driver.ValidateQueuePartition(p); err != nil {
			return nil, err
		}
	}
	if _, err := s.queueDedup(ctx, op, name); err != nil {
		return nil, err
	}
	b, err := s.readBounds(ctx, op, name, ps)
	if err != nil {
		return nil, err
	}
	for i, p := range ps {
		s.sawHead(name, p, b[i].Head)
	}
	return b, nil
}

func entryOf(seq uint64, bins as.BinMap) driver.QueueEntry {
	e := driver.QueueEntry{Seq: seq, Key: stringOf(bins[qbKey]), ID: stringOf(bins[qbID])}
	if b, ok := bins[qbPayload].([]byte); ok {
		e.Payload = b
	}
	if ms, ok := intOf(bins[qbAt]); ok {
		e.At = time.UnixMilli(ms)
	}
	e.Aborted = bins[qbAborted] != nil
	return e
}

// ReadQueue implements driver.QueueStore: the head record, then one batch get of the
// entries' keys from max(from, Floor) up to max or Head (in commands of at most
// queueBatchRecords keys; the read ends early after queueReadBytes of payload); or
// both in one batch when the store has seen a head at least max above from
// (readKnown).
func (s *Store) ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	const op = "aerospike.ReadQueue"
	if err := driver.ValidateQueueRead(name, p, max); err != nil {
		return driver.QueueRead{}, err
	}
	if _, err := s.queueDedup(ctx, op, name); err != nil {
		return driver.QueueRead{}, err
	}
	if r, ok, err := s.readKnown(ctx, op, name, p, from, max); err != nil || ok {
		return r, err
	}
	return s.readHeadFirst(ctx, op, name, p, from, max)
}

// readHeadFirst is ReadQueue's path when the head is not known to be far enough
// above from: the head record, then the entries below it; an empty read of entries
// the head says exist reads the head again (a hole, or a trim that raised the floor
// since), at most three rounds.
func (s *Store) readHeadFirst(ctx context.Context, op, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	for round := 0; ; round++ {
		b, err := s.readBounds(ctx, op, name, []int{p})
		if err != nil {
			return driver.QueueRead{}, err
		}
		s.sawHead(name, p, b[0].Head)
		r := driver.QueueRead{QueueBounds: b[0]}
		start := from
		if r.Floor > start {
			start = r.Floor
		}
		end := r.Head
		if start >= end {
			return r, nil
		}
		if end-start > uint64(max) {
			end = start + uint64(max)
		}
		r.Entries, err = s.readEntries(ctx, op, name, p, start, end)
		if err != nil {
			return driver.QueueRead{}, err
		}
		if len(r.Entries) > 0 || round == 2 {
			return r, nil
		}
		// Nothing at start: a hole, or a trim that raised the floor since: look again.
		nb, err := s.readBounds(ctx, op, name, []int{p})
		if err != nil {
			return driver.QueueRead{}, err
		}
		if nb[0].Floor <= start {
			return r, nil
		}
	}
}

// readKnown is ReadQueue in one round trip, when the store has seen a head at least
// max above from (a consumer catching up): one batch reads the head record and the
// entries [from, from+max), all below head. ok is false when the shortcut does not
// apply (the caller reads the head first): the head read is too low, or the floor is
// above from.
func (s *Store) readKnown(ctx context.Context, op, name string, p int, from uint64, max int) (driver.QueueRead, bool, error) {
	if max > queueBatchRecords || s.knownHead(name, p) < from+uint64(max) {
		return driver.QueueRead{}, false, nil
	}
	recs := make([]as.BatchRecordIfc, 0, max+1)
	recs = append(recs, as.NewBatchRead(nil, s.headKey(name, p), []string{qbHead, qbFloor}))
	for seq := from; seq < from+uint64(max); seq++ {
		recs = append(recs, as.NewBatchRead(nil, s.entryKey(name, p, seq), nil))
	}
	if err := s.runBatch(ctx, op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return driver.QueueRead{}, false, err
	}
	hr := recs[0].BatchRec()
	if hr.ResultCode != types.OK || hr.Record == nil {
		return driver.QueueRead{}, false, nil
	}
	r := driver.QueueRead{QueueBounds: driver.QueueBounds{Head: uintOf(hr.Record.Bins[qbHead]), Floor: uintOf(hr.Record.Bins[qbFloor])}}
	if r.Floor > from || r.Head < from+uint64(max) {
		return driver.QueueRead{}, false, nil
	}
	s.sawHead(name, p, r.Head)
	bytes := 0
	for k, rec := range recs[1:] {
		br := rec.BatchRec()
		if br.ResultCode != types.OK || br.Record == nil {
			break
		}
		e := entryOf(from+uint64(k), br.Record.Bins)
		r.Entries = append(r.Entries, e)
		if bytes += len(e.Payload); bytes >= queueReadBytes {
			break
		}
	}
	if len(r.Entries) == 0 {
		// A hole, or a trim since the head record was read: the slow path tells.
		return driver.QueueRead{}, false, nil
	}
	return r, true, nil
}

// readEntries reads the entries [start, end) up to the first missing one.
func (s *Store) readEntries(ctx context.Context, op, name string, p int, start, end uint64) ([]driver.QueueEntry, error) {
	var out []driver.QueueEntry
	bytes := 0
	for lo := start; lo < end; {
		hi := min(end, lo+queueBatchRecords)
		recs := make([]as.BatchRecordIfc, 0, hi-lo)
		for seq := lo; seq < hi; seq++ {
			recs = append(recs, as.NewBatchRead(nil, s.entryKey(name, p, seq), nil))
		}
		if err := s.runBatch(ctx, op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
			return nil, err
		}
		for k, r := range recs {
			br := r.BatchRec()
			if br.ResultCode != types.OK || br.Record == nil {
				return out, nil
			}
			e := entryOf(lo+uint64(k), br.Record.Bins)
			out = append(out, e)
			if bytes += len(e.Payload); bytes >= queueReadBytes {
				return out, nil
			}
		}
		lo = hi
	}
	return out, nil
}

// readEntry reads one entry; ok is false when there is none.
func (s *Store) readEntry(ctx context.Context, op, name string, p int, seq uint64) (driver.QueueEntry, bool, error) {
	rec, err := s.getRecord(ctx, op, s.entryKey(name, p, seq))
	if err != nil || rec == nil {
		return driver.QueueEntry{}, false, err
	}
	return entryOf(seq, rec.Bins), true, nil
}

// AbortQueueSeq implements driver.QueueStore: a create-only tombstone (TTL
// QueueTombstoneTTL); a seq whose record exists is read. A seq below the floor is not
// written: it is aborted if its tombstone is still there.
func (s *Store) AbortQueueSeq(ctx context.Context, name string, p int, seq uint64) (bool, error) {
	const op = "aerospike.AbortQueueSeq"
	if err := driver.ValidateQueueRead(name, p, 1); err != nil {
		return false, err
	}
	inc, err := s.queueInc(ctx, op, name)
	if err != nil {
		return false, err
	}
	b, err := s.readBounds(ctx, op, name, []int{p})
	if err != nil {
		return false, err
	}
	if seq >= b[0].Head {
		return false, driver.Errorf(dcsync.InvalidArgument, op, "seq %d of partition %d is not below its head %d", seq, p, b[0].Head)
	}
	if seq >= b[0].Floor {
		_, code, err := s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, ttlSeconds(QueueTombstoneTTL))
			wp.RecordExistsAction = as.CREATE_ONLY
			return wp
		}, s.entryKey(name, p, seq), tombstoneOps(inc), types.KEY_EXISTS_ERROR)
		if err != nil {
			return false, err
		}
		if code == types.OK {
			return true, nil
		}
	}
	e, ok, err := s.readEntry(ctx, op, name, p, seq)
	if err != nil {
		return false, err
	}
	return ok && e.Aborted, nil
}

// TrimQueue implements driver.QueueStore: it raises the floor to below, or as far as
// the offsets of the groups that read p and the rewinds in progress allow
// (queue_trim.go, "Trims against rewinds"), then the entries from the head record's
// gc mark up to the floor are deleted by batch deletes of queueTrimChunk keys, tombstones
// excepted (they expire), and gc follows. A trim that dies midway leaves gc behind
// the floor; the next trim of the partition deletes from there.
//
// The raise, the deletes and the gc write are filtered on the records being of the
// queue's incarnation (incIs, see DeleteQueue) read with the head record: a try that
// lands late, after the queue was deleted and created again, changes nothing of the
// new queue (unfiltered, it raised the new queue's floor over its undelivered events,
// which its trim guard, 0 again, let through, and deleted them).
func (s *Store) TrimQueue(ctx context.Context, name string, p int, below uint64) error {
	const op = "aerospike.TrimQueue"
	if err := driver.ValidateQueueRead(name, p, 1); err != nil {
		return err
	}
	inc, err := s.queueInc(ctx, op, name)
	if err != nil {
		return err
	}
	key := s.headKey(name, p)
	// Raise the floor as far as the offsets allow (queue_trim.go).
	g, err := s.raiseFloor(ctx, op, name, p, below, &inc)
	if err != nil {
		return err
	}
	floor, gc := g.floor, g.gc
	notTomb := as.NewBatchDeletePolicy()
	notTomb.FilterExpression = as.ExpAnd(as.ExpNot(as.ExpBinExists(qbAborted)), incIs(inc))
	notTomb.DurableDelete = s.cfg.DurableDelete
	for lo := gc; lo < floor; {
		hi := min(floor, lo+queueTrimChunk)
		recs := make([]as.BatchRecordIfc, 0, hi-lo)
		for seq := lo; seq < hi; seq++ {
			recs = append(recs, as.NewBatchDelete(notTomb, s.entryKey(name, p, seq)))
		}
		if err := s.runBatch(ctx, op, true, recs, nil, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT); err != nil {
			return err
		}
		_, code, err := s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, as.TTLDontUpdate)
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.FilterExpression = incIs(inc)
			return wp
		}, key, []*as.Operation{
			as.ExpWriteOp(qbGC, as.ExpMax(binOr0(qbGC), as.ExpIntVal(int64(hi))), as.ExpWriteFlagDefault),
		}, types.FILTERED_OUT)
		if err != nil {
			return err
		}
		if code == types.FILTERED_OUT {
			return driver.Errorf(dcsync.NotFound, op, "queue %q was deleted and created again during the trim", name)
		}
		lo = hi
	}
	return nil
}
