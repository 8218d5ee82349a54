package aerospike

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
)

// idLoc is where an id record says its event is, and which append put it there.
type idLoc struct {
	p   int
	seq uint64
	w   int64
}

// placement is an event that needs a fresh seq; old is, for an event with an id whose
// earlier seq was aborted, where the id record points now (the compare-and-set's
// expected value).
type placement struct {
	i   int
	old *idLoc
	// set by reserve
	p   int
	seq uint64
}

// entryWrite is a create-only write of events[i] at (p, seq); complete marks the
// completion of another append's unwritten seq (found through the id record loc).
type entryWrite struct {
	i        int
	p        int
	seq      uint64
	complete bool
	loc      idLoc // the id record's value once this write's seq is the id's (ids only)
}

// AppendQueue implements dcsync.QueueStore: see the package doc (Appending).
func (s *Store) AppendQueue(ctx context.Context, name string, events []dcsync.QueueEvent) ([]dcsync.QueueAppend, error) {
	const op = "aerospike.AppendQueue"
	if err := checkQueueName(name); err != nil {
		return nil, err
	}
	if err := dcsync.ValidateQueueEvents(events); err != nil {
		return nil, err
	}
	dedup, err := s.queueDedup(ctx, op, name)
	if err != nil {
		return nil, err
	}
	a := &appender{s: s, op: op, name: name, events: events, w: nonce(), ttl: ttlSeconds(dedup)}
	return a.run(ctx)
}

// queueTestHook, when set (by tests only), is called at stages of an append:
// "reserved" after the reservation, "ids" after the id records; an error ends the
// append there, as if its process died.
var queueTestHook atomic.Pointer[func(queue, stage string) error]

func queueHook(queue, stage string) error {
	if h := queueTestHook.Load(); h != nil {
		return (*h)(queue, stage)
	}
	return nil
}

type appender struct {
	s      *Store
	op     string
	name   string
	events []dcsync.QueueEvent
	w      int64  // this append's writer id
	ttl    uint32 // id records' TTL
}

func (a *appender) run(ctx context.Context) ([]dcsync.QueueAppend, error) {
	out := make([]dcsync.QueueAppend, len(a.events))
	firstOf := map[string]int{}
	dupOf := map[int]int{}
	var check []int
	var place []placement
	for i, e := range a.events {
		if e.ID == "" {
			place = append(place, placement{i: i})
			continue
		}
		if j, ok := firstOf[e.ID]; ok {
			dupOf[i] = j
			continue
		}
		firstOf[e.ID] = i
		check = append(check, i)
	}
	for round := 0; len(check) > 0 || len(place) > 0; round++ {
		if round == queueRounds {
			return nil, dcsync.Errorf(dcsync.RetriesExhausted, a.op, "queue %q: %d rounds of placing events did not place them all (their seqs were aborted, or other appends of their ids raced)", a.name, queueRounds)
		}
		var writes []entryWrite
		if len(check) > 0 {
			newPlace, w, resolved, err := a.checkIDs(ctx, check)
			if err != nil {
				return nil, err
			}
			for i, r := range resolved {
				out[i] = r
			}
			place = append(place, newPlace...)
			writes = append(writes, w...)
			check = nil
		}
		if len(place) > 0 {
			if err := a.reserve(ctx, place); err != nil {
				return nil, err
			}
			reservedAt := time.Now()
			if err := queueHook(a.name, "reserved"); err != nil {
				return nil, err
			}
			w, lost, err := a.writeIDs(ctx, place)
			if err != nil {
				return nil, err
			}
			if err := queueHook(a.name, "ids"); err != nil {
				return nil, err
			}
			if err := a.abort(ctx, lost); err != nil {
				return nil, err
			}
			for _, pl := range lost {
				check = append(check, pl.i)
			}
			place = nil
			if time.Since(reservedAt) > queueMaxWriteDelay {
				return nil, dcsync.Errorf(dcsync.RetriesExhausted, a.op, "queue %q: the events' seqs were reserved more than %v ago; not writing them (consumers abort them; appending again with the same ids is safe)", a.name, queueMaxWriteDelay)
			}
			writes = append(writes, w...)
		}
		if len(writes) == 0 {
			continue
		}
		res, err := a.writeEntries(ctx, writes)
		if err != nil {
			return nil, err
		}
		for k, wr := range writes {
			switch res[k] {
			case entryOurs:
				out[wr.i] = dcsync.QueueAppend{Partition: wr.p, Seq: wr.seq}
			case entrySameID:
				out[wr.i] = dcsync.QueueAppend{Partition: wr.p, Seq: wr.seq, Duplicate: true}
			case entryAborted:
				pl := placement{i: wr.i}
				if a.events[wr.i].ID != "" {
					loc := wr.loc
					pl.old = &loc
				}
				place = append(place, pl)
			}
		}
	}
	for i, j := range dupOf {
		out[i] = dcsync.QueueAppend{Partition: out[j].Partition, Seq: out[j].Seq, Duplicate: true}
	}
	return out, nil
}

// checkIDs reads the id records of events check. An event whose id has none is to be
// placed; one whose id's event is stored is a duplicate; one whose id's seq was
// aborted is to be placed again (moving the id record); one whose id's seq is
// unwritten is completed by a write of this event there.
func (a *appender) checkIDs(ctx context.Context, check []int) ([]placement, []entryWrite, map[int]dcsync.QueueAppend, error) {
	recs := make([]as.BatchRecordIfc, len(check))
	for k, i := range check {
		recs[k] = as.NewBatchRead(nil, a.s.idKey(a.name, a.events[i].ID), []string{qbPart, qbSeq, qbWriter})
	}
	if err := a.s.runBatch(ctx, a.op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, nil, nil, err
	}
	var place []placement
	var foundI []int
	var locs []idLoc
	for k, i := range check {
		br := recs[k].BatchRec()
		if br.ResultCode != types.OK || br.Record == nil {
			place = append(place, placement{i: i})
			continue
		}
		loc := idLoc{p: int(uintOf(br.Record.Bins[qbPart])), seq: uintOf(br.Record.Bins[qbSeq])}
		loc.w, _ = intOf(br.Record.Bins[qbWriter])
		foundI, locs = append(foundI, i), append(locs, loc)
	}
	if len(foundI) == 0 {
		return place, nil, nil, nil
	}
	// The entries the id records point to, and their partitions' floors.
	recs = make([]as.BatchRecordIfc, 0, 2*len(foundI))
	for _, loc := range locs {
		recs = append(recs, as.NewBatchRead(nil, a.s.entryKey(a.name, loc.p, loc.seq), []string{qbWriter, qbID, qbAborted}),
			as.NewBatchRead(nil, a.s.headKey(a.name, loc.p), []string{qbFloor}))
	}
	if err := a.s.runBatch(ctx, a.op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, nil, nil, err
	}
	var writes []entryWrite
	resolved := map[int]dcsync.QueueAppend{}
	for k, i := range foundI {
		loc := locs[k]
		entry, head := recs[2*k].BatchRec(), recs[2*k+1].BatchRec()
		var floor uint64
		if head.ResultCode == types.OK && head.Record != nil {
			floor = uintOf(head.Record.Bins[qbFloor])
		}
		switch {
		case entry.ResultCode == types.OK && entry.Record != nil && entry.Record.Bins[qbAborted] != nil:
			place = append(place, placement{i: i, old: &loc})
		case entry.ResultCode == types.OK:
			resolved[i] = dcsync.QueueAppend{Partition: loc.p, Seq: loc.seq, Duplicate: true}
		case loc.seq < floor:
			// Trimmed: its event was stored and consumed (a tombstone outlives trims).
			resolved[i] = dcsync.QueueAppend{Partition: loc.p, Seq: loc.seq, Duplicate: true}
		default:
			writes = append(writes, entryWrite{i: i, p: loc.p, seq: loc.seq, complete: true, loc: loc})
		}
	}
	return place, writes, resolved, nil
}

// reserveOps reserve n seqs in a head record, or, when the record holds nonce already
// (an in-doubt earlier try of this reservation was applied), return that try's first
// seq without reserving again. The reply's qbWas is that first seq (-1: reserved now)
// and qbHead the head after the op.
func (s *Store) reserveOps(nonce int64, n int) []*as.Operation {
	res := as.ExpMapBin(qbRes)
	hasRes := as.ExpBinExists(qbRes)
	key := as.ExpIntVal(nonce)
	has := as.ExpAnd(hasRes, as.ExpMapGetByKey(as.MapReturnType.EXISTS, as.ExpTypeBOOL, key, res))
	was := as.ExpCond(has, as.ExpMapGetByKey(as.MapReturnType.VALUE, as.ExpTypeINT, key, res), as.ExpIntVal(-1))
	head := binOr0(qbHead)
	m := as.ExpCond(hasRes, res, as.ExpMapVal(map[any]any{}))
	// Runs after head was raised: the first seq is the new head less n.
	put := as.ExpMapPut(as.DefaultMapPolicy(), key, as.ExpNumSub(as.ExpIntBin(qbHead), as.ExpIntVal(int64(n))), m)
	kept := as.ExpMapRemoveByRankRange(as.MapReturnType.NONE|as.MapReturnType.INVERTED, as.ExpIntVal(-int64(s.cfg.OpIDsKept)), put)
	return []*as.Operation{
		as.ExpReadOp(qbWas, was, as.ExpReadFlagDefault),
		as.ExpWriteOp(qbHead, as.ExpCond(has, head, as.ExpNumAdd(head, as.ExpIntVal(int64(n)))), as.ExpWriteFlagDefault),
		as.ExpWriteOp(qbRes, as.ExpCond(has, as.ExpUnknown(), kept), as.ExpWriteFlagEvalNoFail),
		as.GetBinOp(qbHead),
	}
}

// reserve gives every placement a seq: one reservation per partition (the
// placements' order within a partition kept), all partitions in one batch.
func (a *appender) reserve(ctx context.Context, place []placement) error {
	slices.SortFunc(place, func(x, y placement) int { return x.i - y.i })
	var parts []int
	count := map[int]int{}
	for _, pl := range place {
		p := a.events[pl.i].Partition
		if count[p] == 0 {
			parts = append(parts, p)
		}
		count[p]++
	}
	bwp := as.NewBatchWritePolicy()
	bwp.Expiration = as.TTLDontExpire
	recs := make([]as.BatchRecordIfc, len(parts))
	for k, p := range parts {
		recs[k] = as.NewBatchWrite(bwp, a.s.headKey(a.name, p), a.s.reserveOps(nonce(), count[p])...)
	}
	if err := a.s.runBatch(ctx, a.op, true, recs, nil); err != nil {
		return err
	}
	next := map[int]uint64{}
	for k, p := range parts {
		rec := recs[k].BatchRec().Record
		if rec == nil {
			return dcsync.Errorf(dcsync.Internal, a.op, "queue %q partition %d: the reservation returned no record", a.name, p)
		}
		was, _ := intOf(rec.Bins[qbWas])
		if was >= 0 {
			next[p] = uint64(was)
			a.s.log.Debug("aerospike: in-doubt reservation was applied; reusing it", "queue", a.name, "partition", p, "seq", was)
		} else {
			head, ok := intOf(rec.Bins[qbHead])
			if !ok || head < int64(count[p]) {
				return dcsync.Errorf(dcsync.Internal, a.op, "queue %q partition %d: the reservation returned head %v", a.name, p, rec.Bins[qbHead])
			}
			next[p] = uint64(head) - uint64(count[p])
			a.s.sawHead(a.name, p, uint64(head))
		}
	}
	for k := range place {
		p := a.events[place[k].i].Partition
		place[k].p, place[k].seq = p, next[p]
		next[p]++
	}
	return nil
}

// writeIDs points the ids of the placed events that have one at their new seqs: a new
// id record (create, or overwrite of this append's own earlier try), or, for an event
// placed again, a compare-and-set from its old seq. It returns the entry writes of the
// placements and the placements that lost their id to another append.
func (a *appender) writeIDs(ctx context.Context, place []placement) ([]entryWrite, []placement, error) {
	writes := make([]entryWrite, 0, len(place))
	var recs []as.BatchRecordIfc
	var which []int
	for k, pl := range place {
		e := a.events[pl.i]
		wr := entryWrite{i: pl.i, p: pl.p, seq: pl.seq, loc: idLoc{p: pl.p, seq: pl.seq, w: a.w}}
		writes = append(writes, wr)
		if e.ID == "" {
			continue
		}
		mine := as.ExpAnd(as.ExpEq(as.ExpIntBin(qbWriter), as.ExpIntVal(a.w)),
			as.ExpEq(as.ExpIntBin(qbPart), as.ExpIntVal(int64(pl.p))),
			as.ExpEq(as.ExpIntBin(qbSeq), as.ExpIntVal(int64(pl.seq))))
		bwp := as.NewBatchWritePolicy()
		bwp.Expiration = a.ttl
		if pl.old == nil {
			bwp.RecordExistsAction = as.UPDATE
			bwp.FilterExpression = mine
		} else {
			bwp.RecordExistsAction = as.UPDATE_ONLY
			bwp.FilterExpression = as.ExpOr(as.ExpAnd(
				as.ExpEq(as.ExpIntBin(qbPart), as.ExpIntVal(int64(pl.old.p))),
				as.ExpEq(as.ExpIntBin(qbSeq), as.ExpIntVal(int64(pl.old.seq)))), mine)
		}
		recs = append(recs, as.NewBatchWrite(bwp, a.s.idKey(a.name, e.ID),
			as.PutOp(as.NewBin(qbPart, pl.p)), as.PutOp(as.NewBin(qbSeq, int64(pl.seq))), as.PutOp(as.NewBin(qbWriter, a.w))))
		which = append(which, k)
	}
	if err := a.s.runBatch(ctx, a.op, true, recs, nil, types.FILTERED_OUT, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, nil, err
	}
	var lost []placement
	drop := map[int]bool{}
	for r, k := range which {
		if recs[r].BatchRec().ResultCode != types.OK {
			lost = append(lost, place[k])
			drop[k] = true
		}
	}
	if len(drop) == 0 {
		return writes, nil, nil
	}
	kept := writes[:0]
	for k, wr := range writes {
		if !drop[k] {
			kept = append(kept, wr)
		}
	}
	return kept, lost, nil
}

// abort writes tombstones at the seqs of placements this append will not use.
func (a *appender) abort(ctx context.Context, lost []placement) error {
	if len(lost) == 0 {
		return nil
	}
	recs := make([]as.BatchRecordIfc, len(lost))
	for k, pl := range lost {
		recs[k] = as.NewBatchWrite(tombstonePolicy(), a.s.entryKey(a.name, pl.p, pl.seq), tombstoneOps()...)
	}
	// An event there (impossible: no id record pointed at these seqs) is left alone.
	return a.s.runBatch(ctx, a.op, true, recs, nil, types.KEY_EXISTS_ERROR)
}

func tombstonePolicy() *as.BatchWritePolicy {
	bwp := as.NewBatchWritePolicy()
	bwp.RecordExistsAction = as.CREATE_ONLY
	bwp.Expiration = ttlSeconds(QueueTombstoneTTL)
	return bwp
}

func tombstoneOps() []*as.Operation {
	return []*as.Operation{as.PutOp(as.NewBin(qbAborted, 1)), as.ExpWriteOp(qbAt, serverNow(), as.ExpWriteFlagDefault)}
}

// Outcomes of an entry write.
const (
	entryOurs    = iota // written by this append (now or by an in-doubt earlier try)
	entrySameID         // another append's event with the same id is there
	entryAborted        // the seq was aborted: place the event again
)

func entryOps(e dcsync.QueueEvent, w int64) []*as.Operation {
	ops := make([]*as.Operation, 0, 5)
	ops = append(ops, as.PutOp(as.NewBin(qbWriter, w)), as.ExpWriteOp(qbAt, serverNow(), as.ExpWriteFlagDefault))
	if e.Key != "" {
		ops = append(ops, as.PutOp(as.NewBin(qbKey, e.Key)))
	}
	if e.ID != "" {
		ops = append(ops, as.PutOp(as.NewBin(qbID, e.ID)))
	}
	if len(e.Payload) > 0 {
		ops = append(ops, as.PutOp(as.NewBin(qbPayload, e.Payload)))
	}
	return ops
}

// writeEntries writes the events create-only and classifies each write.
func (a *appender) writeEntries(ctx context.Context, writes []entryWrite) ([]int, error) {
	bwp := as.NewBatchWritePolicy()
	bwp.RecordExistsAction = as.CREATE_ONLY
	bwp.Expiration = as.TTLDontExpire
	recs := make([]as.BatchRecordIfc, len(writes))
	for k, wr := range writes {
		recs[k] = as.NewBatchWrite(bwp, a.s.entryKey(a.name, wr.p, wr.seq), entryOps(a.events[wr.i], a.w)...)
	}
	size := func(k int) int {
		e := a.events[writes[k].i]
		return len(e.Payload) + len(e.Key) + len(e.ID)
	}
	if err := a.s.runBatch(ctx, a.op, true, recs, size, types.KEY_EXISTS_ERROR); err != nil {
		return nil, err
	}
	res := make([]int, len(writes))
	var exists []int
	for k := range writes {
		if recs[k].BatchRec().ResultCode == types.KEY_EXISTS_ERROR {
			exists = append(exists, k)
		}
	}
	if len(exists) == 0 {
		return res, nil
	}
	reads := make([]as.BatchRecordIfc, len(exists))
	for r, k := range exists {
		reads[r] = as.NewBatchRead(nil, recs[k].BatchRec().Key, []string{qbWriter, qbID, qbAborted})
	}
	if err := a.s.runBatch(ctx, a.op, false, reads, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, err
	}
	for r, k := range exists {
		wr := writes[k]
		br := reads[r].BatchRec()
		if br.ResultCode != types.OK || br.Record == nil {
			// Deleted since: trimmed, so an event was there (a tombstone outlives trims)
			// and was consumed. Without an id only this append writes its seqs: it was
			// an in-doubt earlier try of ours; with one, it may be another append's.
			res[k] = entryOurs
			if a.events[wr.i].ID != "" {
				res[k] = entrySameID
			}
			continue
		}
		bins := br.Record.Bins
		w, _ := intOf(bins[qbWriter])
		switch {
		case bins[qbAborted] != nil:
			res[k] = entryAborted
			a.s.log.Debug("aerospike: queue seq was aborted before our write; appending again", "queue", a.name, "partition", wr.p, "seq", wr.seq)
		case w == a.w:
			res[k] = entryOurs
		case a.events[wr.i].ID != "" && stringOf(bins[qbID]) == a.events[wr.i].ID:
			res[k] = entrySameID
		default:
			return nil, dcsync.Errorf(dcsync.Internal, a.op, "queue %q partition %d seq %d: our reserved seq holds another append's event", a.name, wr.p, wr.seq)
		}
	}
	return res, nil
}
