package aerospike

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// idLoc is where an id record says its event is, and which append put it there.
type idLoc struct {
	p   int
	seq uint64
	w   int64
}

// placement is an event that gets a fresh seq: one without an id, or one whose id
// record this append holds (claimed, pending).
type placement struct {
	i int
	// set by reserve
	p   int
	seq uint64
}

// entryWrite is a create-only write of events[i] at (p, seq); loc is the id record's
// value that points at it (ids only).
type entryWrite struct {
	i   int
	p   int
	seq uint64
	loc idLoc
}

// claimReq is a compare-and-set that makes an id record this append's pending claim:
// from an aborted seq (loc) or from another append's claim left pending too long
// (stale, loc.w its writer).
type claimReq struct {
	i     int
	loc   idLoc
	stale bool
}

// AppendQueue implements driver.QueueStore: see the package doc (Appending).
func (s *Store) AppendQueue(ctx context.Context, name string, events []driver.QueueEvent) ([]driver.QueueAppend, error) {
	const op = "aerospike.AppendQueue"
	if err := checkQueueName(name); err != nil {
		return nil, err
	}
	if err := driver.ValidateQueueEvents(events); err != nil {
		return nil, err
	}
	dedup, err := s.queueDedup(ctx, op, name)
	if err != nil {
		return nil, err
	}
	inc, err := s.queueInc(ctx, op, name)
	if err != nil {
		return nil, err
	}
	a := &appender{s: s, op: op, name: name, events: events, w: nonce(), ttl: ttlSeconds(dedup), inc: inc}
	return a.run(ctx)
}

// queueClaimTimeout is how long an id record may stay claimed without a seq before
// another append of the id takes the claim over (its holder died, or is that slow).
const queueClaimTimeout = 5 * time.Second

// queueTestHook, when set (by tests only), is called at stages of an append:
// "reserved" after the reservation, "ids" after the id records point at the seqs; an
// error ends the append there, as if its process died. Trims and rewinds call it too
// (queue_trim.go): "trim-offsets-read" after a trim read the offsets, "rewind-pinned"
// after a rewind pinned and before it writes the offset; and DeleteQueue:
// "delete-bounds-read" after it read the heads, before its deletes.
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
	events []driver.QueueEvent
	w      int64  // this append's writer id
	ttl    uint32 // id records' TTL
	inc    int64  // the queue's incarnation id (qbInc), written in the records it creates
}

// run places the events in rounds. A round claims the ids not yet claimed, inspects
// the id records it could not claim, takes over claims (from aborted seqs, or stale),
// reserves seqs for the events it may append, points their id records at them and
// writes the events. An event whose id another append holds, pending, waits for a
// later round; every claim this append holds is pointed and written within the round
// it was taken, so an append never waits while holding a claim another waits for.
func (a *appender) run(ctx context.Context) ([]driver.QueueAppend, error) {
	out := make([]driver.QueueAppend, len(a.events))
	firstOf := map[string]int{}
	dupOf := map[int]int{}
	var claim, check []int
	var cas []claimReq
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
		claim = append(claim, i)
	}
	deadline := time.Now().Add(4*queueClaimTimeout + time.Duration(a.s.cfg.Attempts)*a.s.cfg.Timeout)
	waits := 0
	for len(claim)+len(check)+len(cas)+len(place) > 0 {
		if time.Now().After(deadline) {
			return nil, driver.Errorf(dcsync.RetriesExhausted, a.op, "queue %q: events still unplaced after %v (their ids held by other appends, or their seqs aborted); appending them again with the same ids is safe", a.name, 4*queueClaimTimeout)
		}
		var writes []entryWrite
		var waiting, nextClaim []int
		var nextCAS []claimReq
		var nextPlace []placement
		if len(claim) > 0 {
			held, refused, err := a.claim(ctx, claim)
			if err != nil {
				return nil, err
			}
			place = append(place, held...)
			check = append(check, refused...)
			claim = nil
		}
		if len(check) > 0 {
			res, err := a.inspect(ctx, check)
			if err != nil {
				return nil, err
			}
			for k, i := range check {
				r := res[k]
				switch r.what {
				case idGone:
					nextClaim = append(nextClaim, i)
				case idOurs:
					place = append(place, placement{i: i})
				case idDuplicate:
					out[i] = driver.QueueAppend{Partition: r.loc.p, Seq: r.loc.seq, Duplicate: true}
				case idUnwritten:
					writes = append(writes, entryWrite{i: i, p: r.loc.p, seq: r.loc.seq, loc: r.loc})
				case idAborted:
					cas = append(cas, claimReq{i: i, loc: r.loc})
				case idStale:
					cas = append(cas, claimReq{i: i, loc: r.loc, stale: true})
				case idPending:
					waiting = append(waiting, i)
				}
			}
			check = nil
		}
		if len(cas) > 0 {
			held, refused, err := a.takeOver(ctx, cas)
			if err != nil {
				return nil, err
			}
			place = append(place, held...)
			nextCheck := refused
			waiting = append(waiting, nextCheck...)
			cas = nil
		}
		if len(place) > 0 {
			if err := a.reserve(ctx, place); err != nil {
				return nil, err
			}
			reservedAt := time.Now()
			if err := queueHook(a.name, "reserved"); err != nil {
				return nil, err
			}
			w, lost, err := a.point(ctx, place)
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
				nextClaim = append(nextClaim, pl.i)
			}
			place = nil
			if time.Since(reservedAt) > queueMaxWriteDelay {
				return nil, driver.Errorf(dcsync.RetriesExhausted, a.op, "queue %q: the events' seqs were reserved more than %v ago; not writing them (consumers abort them; appending again with the same ids is safe)", a.name, queueMaxWriteDelay)
			}
			writes = append(writes, w...)
		}
		if len(writes) > 0 {
			res, err := a.writeEntries(ctx, writes)
			if err != nil {
				return nil, err
			}
			for k, wr := range writes {
				switch res[k] {
				case entryOurs:
					out[wr.i] = driver.QueueAppend{Partition: wr.p, Seq: wr.seq}
				case entrySameID:
					out[wr.i] = driver.QueueAppend{Partition: wr.p, Seq: wr.seq, Duplicate: true}
				case entryAborted:
					if a.events[wr.i].ID == "" {
						nextPlace = append(nextPlace, placement{i: wr.i})
					} else {
						nextCAS = append(nextCAS, claimReq{i: wr.i, loc: wr.loc})
					}
				}
			}
		}
		claim, check, cas, place = nextClaim, waiting, nextCAS, nextPlace
		if len(claim)+len(cas)+len(place) == 0 && len(check) > 0 {
			// Only ids other appends hold: give them time to point them.
			waits++
			t := time.NewTimer(min(time.Millisecond<<min(waits, 6), 50*time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, driver.Errorf(dcsync.Connection, a.op, "queue %q: waiting for other appends of the same ids: %w", a.name, ctx.Err())
			case <-t.C:
			}
		}
	}
	for i, j := range dupOf {
		out[i] = driver.QueueAppend{Partition: out[j].Partition, Seq: out[j].Seq, Duplicate: true}
	}
	return out, nil
}

// mine is true on an id record this append holds, pending (no seq yet).
func (a *appender) mine() *as.Expression {
	return as.ExpAnd(as.ExpBinExists(qbWriter), as.ExpEq(as.ExpIntBin(qbWriter), as.ExpIntVal(a.w)), as.ExpNot(as.ExpBinExists(qbSeq)))
}

func (a *appender) idPolicy(exists as.RecordExistsAction, filter *as.Expression) *as.BatchWritePolicy {
	bwp := as.NewBatchWritePolicy()
	bwp.RecordExistsAction = exists
	bwp.Expiration = a.ttl
	bwp.FilterExpression = filter
	return bwp
}

// claim creates the id records of events claim as this append's pending claims (a
// record that is already this append's, from an in-doubt try, passes the filter). It
// returns the claims held and the events whose id record exists.
func (a *appender) claim(ctx context.Context, claim []int) ([]placement, []int, error) {
	recs := make([]as.BatchRecordIfc, len(claim))
	for k, i := range claim {
		recs[k] = as.NewBatchWrite(a.idPolicy(as.UPDATE, a.mine()), a.s.idKey(a.name, a.events[i].ID),
			withInc([]*as.Operation{as.PutOp(as.NewBin(qbWriter, a.w)), as.PutOp(as.NewBin(qbQueue, a.name))}, a.inc)...)
	}
	if err := a.s.runBatch(ctx, a.op, true, recs, nil, types.FILTERED_OUT); err != nil {
		return nil, nil, err
	}
	var held []placement
	var refused []int
	for k, i := range claim {
		if recs[k].BatchRec().ResultCode == types.OK {
			held = append(held, placement{i: i})
		} else {
			refused = append(refused, i)
		}
	}
	return held, refused, nil
}

// What inspect finds of an id.
const (
	idGone      = iota // no id record (expired): claim it
	idOurs             // this append's pending claim
	idDuplicate        // its event is stored (or was, and was trimmed)
	idUnwritten        // its seq is not written: complete it
	idAborted          // its seq was aborted: claim it from there
	idStale            // another append's claim, pending longer than queueClaimTimeout
	idPending          // another append's claim, pending: wait
)

type idState struct {
	what int
	loc  idLoc
}

// rAge names the age (ms since the last write) inspect reads of an id record.
const rAge = "dcsync_r_age"

// inspect reads the id records of events check and, for those that point at a seq,
// the entry there and its partition's floor.
func (a *appender) inspect(ctx context.Context, check []int) ([]idState, error) {
	recs := make([]as.BatchRecordIfc, len(check))
	for k, i := range check {
		recs[k] = as.NewBatchReadOps(nil, a.s.idKey(a.name, a.events[i].ID),
			as.GetBinOp(qbPart), as.GetBinOp(qbSeq), as.GetBinOp(qbWriter),
			as.ExpReadOp(rAge, as.ExpSinceUpdate(), as.ExpReadFlagDefault))
	}
	if err := a.s.runBatch(ctx, a.op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, err
	}
	out := make([]idState, len(check))
	var pointed []int // indexes into check
	for k := range check {
		br := recs[k].BatchRec()
		if br.ResultCode != types.OK || br.Record == nil {
			out[k].what = idGone
			continue
		}
		bins := br.Record.Bins
		loc := idLoc{p: int(uintOf(bins[qbPart])), seq: uintOf(bins[qbSeq])}
		loc.w, _ = intOf(bins[qbWriter])
		out[k].loc = loc
		age, _ := intOf(bins[rAge])
		switch {
		case bins[qbSeq] != nil:
			pointed = append(pointed, k)
		case loc.w == a.w:
			out[k].what = idOurs
		case age >= queueClaimTimeout.Milliseconds():
			out[k].what = idStale
		default:
			out[k].what = idPending
		}
	}
	if len(pointed) == 0 {
		return out, nil
	}
	recs = make([]as.BatchRecordIfc, 0, 2*len(pointed))
	for _, k := range pointed {
		loc := out[k].loc
		recs = append(recs, as.NewBatchRead(nil, a.s.entryKey(a.name, loc.p, loc.seq), []string{qbWriter, qbID, qbAborted}),
			as.NewBatchRead(nil, a.s.headKey(a.name, loc.p), []string{qbFloor}))
	}
	if err := a.s.runBatch(ctx, a.op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, err
	}
	for n, k := range pointed {
		entry, head := recs[2*n].BatchRec(), recs[2*n+1].BatchRec()
		var floor uint64
		if head.ResultCode == types.OK && head.Record != nil {
			floor = uintOf(head.Record.Bins[qbFloor])
		}
		switch {
		case entry.ResultCode == types.OK && entry.Record != nil && entry.Record.Bins[qbAborted] != nil:
			out[k].what = idAborted
		case entry.ResultCode == types.OK:
			out[k].what = idDuplicate
		case out[k].loc.seq < floor:
			// Trimmed: its event was stored and consumed (a tombstone outlives trims).
			out[k].what = idDuplicate
		default:
			out[k].what = idUnwritten
		}
	}
	return out, nil
}

// takeOver makes id records this append's pending claims by compare-and-set: from the
// aborted seq they point at, or from another append's stale claim. An in-doubt
// earlier try passes the filter as this append's own claim. It returns the claims
// held and the events to inspect again.
func (a *appender) takeOver(ctx context.Context, cas []claimReq) ([]placement, []int, error) {
	recs := make([]as.BatchRecordIfc, len(cas))
	for k, c := range cas {
		var from *as.Expression
		if c.stale {
			from = as.ExpAnd(as.ExpNot(as.ExpBinExists(qbSeq)), as.ExpBinExists(qbWriter),
				as.ExpEq(as.ExpIntBin(qbWriter), as.ExpIntVal(c.loc.w)),
				as.ExpGreaterEq(as.ExpSinceUpdate(), as.ExpIntVal(queueClaimTimeout.Milliseconds())))
		} else {
			from = as.ExpAnd(as.ExpBinExists(qbSeq), as.ExpBinExists(qbPart),
				as.ExpEq(as.ExpIntBin(qbPart), as.ExpIntVal(int64(c.loc.p))),
				as.ExpEq(as.ExpIntBin(qbSeq), as.ExpIntVal(int64(c.loc.seq))))
		}
		recs[k] = as.NewBatchWrite(a.idPolicy(as.UPDATE_ONLY, as.ExpOr(from, a.mine())), a.s.idKey(a.name, a.events[c.i].ID),
			as.PutOp(as.NewBin(qbWriter, a.w)), as.PutOp(as.NewBin(qbPart, nil)), as.PutOp(as.NewBin(qbSeq, nil)))
	}
	if err := a.s.runBatch(ctx, a.op, true, recs, nil, types.FILTERED_OUT, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, nil, err
	}
	var held []placement
	var refused []int
	for k, c := range cas {
		if recs[k].BatchRec().ResultCode == types.OK {
			held = append(held, placement{i: c.i})
			if c.stale {
				a.s.log.Debug("aerospike: took over an id claim left pending", "queue", a.name, "id", a.events[c.i].ID)
			}
		} else {
			refused = append(refused, c.i)
		}
	}
	return held, refused, nil
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
		recs[k] = as.NewBatchWrite(bwp, a.s.headKey(a.name, p), withInc(a.s.reserveOps(nonce(), count[p]), a.inc)...)
	}
	if err := a.s.runBatch(ctx, a.op, true, recs, nil); err != nil {
		return err
	}
	next := map[int]uint64{}
	for k, p := range parts {
		rec := recs[k].BatchRec().Record
		if rec == nil {
			return driver.Errorf(dcsync.Internal, a.op, "queue %q partition %d: the reservation returned no record", a.name, p)
		}
		was, _ := intOf(rec.Bins[qbWas])
		if was >= 0 {
			next[p] = uint64(was)
			a.s.log.Debug("aerospike: in-doubt reservation was applied; reusing it", "queue", a.name, "partition", p, "seq", was)
		} else {
			head, ok := intOf(rec.Bins[qbHead])
			if !ok || head < int64(count[p]) {
				return driver.Errorf(dcsync.Internal, a.op, "queue %q partition %d: the reservation returned head %v", a.name, p, rec.Bins[qbHead])
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

// point points the id records this append holds at their events' new seqs (filter:
// still this append's claim; an in-doubt earlier try passes it too, being the same
// write). It returns the entry writes and the placements whose claim another append
// took over meanwhile.
func (a *appender) point(ctx context.Context, place []placement) ([]entryWrite, []placement, error) {
	writes := make([]entryWrite, 0, len(place))
	var recs []as.BatchRecordIfc
	var which []int
	for k, pl := range place {
		e := a.events[pl.i]
		writes = append(writes, entryWrite{i: pl.i, p: pl.p, seq: pl.seq, loc: idLoc{p: pl.p, seq: pl.seq, w: a.w}})
		if e.ID == "" {
			continue
		}
		ours := as.ExpAnd(as.ExpBinExists(qbWriter), as.ExpEq(as.ExpIntBin(qbWriter), as.ExpIntVal(a.w)))
		recs = append(recs, as.NewBatchWrite(a.idPolicy(as.UPDATE_ONLY, ours), a.s.idKey(a.name, e.ID),
			as.PutOp(as.NewBin(qbPart, pl.p)), as.PutOp(as.NewBin(qbSeq, int64(pl.seq)))))
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
		recs[k] = as.NewBatchWrite(tombstonePolicy(), a.s.entryKey(a.name, pl.p, pl.seq), tombstoneOps(a.inc)...)
	}
	// No id record ever pointed at these seqs, so no event can be there; one that
	// were would be left alone.
	return a.s.runBatch(ctx, a.op, true, recs, nil, types.KEY_EXISTS_ERROR)
}

func tombstonePolicy() *as.BatchWritePolicy {
	bwp := as.NewBatchWritePolicy()
	bwp.RecordExistsAction = as.CREATE_ONLY
	bwp.Expiration = ttlSeconds(QueueTombstoneTTL)
	return bwp
}

// tombstoneOps write the tombstone of an aborted seq of the queue incarnation inc.
func tombstoneOps(inc int64) []*as.Operation {
	return withInc([]*as.Operation{as.PutOp(as.NewBin(qbAborted, 1)), as.ExpWriteOp(qbAt, serverNow(), as.ExpWriteFlagDefault)}, inc)
}

// Outcomes of an entry write.
const (
	entryOurs    = iota // written by this append (now or by an in-doubt earlier try)
	entrySameID         // another append's event with the same id is there
	entryAborted        // the seq was aborted: place the event again
)

// entryOps write event e by the append of writer id w to the queue incarnation inc.
func entryOps(e driver.QueueEvent, w, inc int64) []*as.Operation {
	ops := make([]*as.Operation, 0, 6)
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
	return withInc(ops, inc)
}

// writeEntries writes the events create-only and classifies each write.
func (a *appender) writeEntries(ctx context.Context, writes []entryWrite) ([]int, error) {
	bwp := as.NewBatchWritePolicy()
	bwp.RecordExistsAction = as.CREATE_ONLY
	bwp.Expiration = as.TTLDontExpire
	recs := make([]as.BatchRecordIfc, len(writes))
	for k, wr := range writes {
		recs[k] = as.NewBatchWrite(bwp, a.s.entryKey(a.name, wr.p, wr.seq), entryOps(a.events[wr.i], a.w, a.inc)...)
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
			return nil, driver.Errorf(dcsync.Internal, a.op, "queue %q partition %d seq %d: our reserved seq holds another append's event", a.name, wr.p, wr.seq)
		}
	}
	return res, nil
}
