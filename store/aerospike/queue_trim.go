package aerospike

// # Trims against rewinds
//
// A trim must not delete events that a group's offset, moved back (a rewind: Seek,
// Reset) after the trim's caller read it, still has to deliver. The offsets and the
// floor are different records, so the head record carries two more bins that both
// sides condition on (a filter expression on the server):
//
//   - tg, the trim guard: an integer that every write of floor or pins increments,
//     filtered on the value the writer read, so that a write decided on a read of the
//     head record applies only if neither changed since;
//   - pins, the rewinds in progress: per group, len | group | next | token | version
//     (a blob): a rewind of that group's offset to next, by the write of that token
//     and version.
//
// A rewind (CommitQueueOffset whose Next is below the stored Next) first pins: it
// reads the head record, is refused (InvalidArgument, nothing written) when its Next
// is below the floor, and otherwise adds its pin, filtered on tg. Only then does it
// write the offset.
//
// A trim reads the head and spec records (one batch), then the offsets of the groups
// that read the partition (one batch), and raises floor to the lowest of below, those
// offsets' Next and the Next of the pins still live, filtered on the tg it read. A pin
// is live until the offset it pins shows the pinned write or a later one (token,
// version at least the pin's): the rewind's write has then landed (and the offset
// holds the trim back itself) or can never land (its filter wants a lower version or
// another token); the trim drops it in the same write.
//
// Why this is enough: a rewind that returned nil pinned before writing. A trim whose
// head read came before the pin finds tg changed and reads again, unless it raised
// the floor before the pin landed: then the pin's read saw the raised floor and the
// rewind was refused if below it. A trim whose head read came after the pin sees the
// pin live (its Next caps the trim) or the offset the rewind wrote (it caps the
// trim). So the floor never passes a rewound offset, and the batch deletes below the
// floor can land at any time. A pin whose rewind died before its write stays until the
// group's offset is written again, and holds trims back at its Next until then.
//
// # Trims against added groups
//
// The groups a trim waits for come from the spec record, which the raise's filter (on
// the head record) cannot read. So AddQueueGroup, after its write of the spec,
// increments tg in the head record of every shared partition (a batch write, one
// command per node), and a trim reads the spec twice: with the head record (for the
// groups), and again in the batch of the offsets, which starts after the head read
// returned; it starts over when the second read shows more groups. A group G the trim
// left out was then added after the second read, so after the head read, and G's
// increment of tg comes after that: the raise (filtered on the tg of the head read)
// lands before the increment or not at all, also when it is an attempt sent again that
// lands late. Hence once AddQueueGroup returns, no trim raises the floor past the new
// group's offset (0): the group's consumers start at the oldest event still stored
// when it returned. (A raise that lands between the spec write and the increment
// passes 0: it is ordered before the add, which is done only when the increment is.)
// The private partition of a group needs no increment: only that group reads it.

import (
	"context"
	"encoding/binary"
	"fmt"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Bins of the head record for trims against rewinds.
const (
	qbGuard = "tg"
	qbPins  = "pins"
)

// rewindPin is a rewind in progress: group's offset moved back to next by the write
// of token and version.
type rewindPin struct {
	group                string
	next, token, version uint64
}

// landed reports whether off shows the pinned write or a later one.
func (p rewindPin) landed(off driver.QueueOffset) bool {
	return off.Token > p.token || off.Token == p.token && off.Version >= p.version
}

func encodePins(pins []rewindPin) []byte {
	b := []byte{}
	for _, p := range pins {
		b = append(b, byte(len(p.group)))
		b = append(b, p.group...)
		b = binary.BigEndian.AppendUint64(b, p.next)
		b = binary.BigEndian.AppendUint64(b, p.token)
		b = binary.BigEndian.AppendUint64(b, p.version)
	}
	return b
}

func decodePins(v any) ([]rewindPin, error) {
	var b []byte
	switch x := v.(type) {
	case nil:
		return nil, nil
	case []byte:
		b = x
	case string:
		b = []byte(x)
	default:
		return nil, fmt.Errorf("pins bin holds a %T", v)
	}
	var out []rewindPin
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+24 {
			return nil, fmt.Errorf("pins bin truncated")
		}
		p := rewindPin{group: string(b[1 : 1+n])}
		b = b[1+n:]
		p.next = binary.BigEndian.Uint64(b[0:8])
		p.token = binary.BigEndian.Uint64(b[8:16])
		p.version = binary.BigEndian.Uint64(b[16:24])
		out = append(out, p)
		b = b[24:]
	}
	return out, nil
}

// trimGuard is the head record as a trim or a rewind decides on it.
type trimGuard struct {
	head, floor, gc, guard uint64
	pins                   []rewindPin
}

var guardBins = []string{qbHead, qbFloor, qbGC, qbGuard, qbPins}

func guardOf(op string, rec *as.Record) (trimGuard, error) {
	if rec == nil {
		return trimGuard{}, nil
	}
	g := trimGuard{head: uintOf(rec.Bins[qbHead]), floor: uintOf(rec.Bins[qbFloor]), gc: uintOf(rec.Bins[qbGC]), guard: uintOf(rec.Bins[qbGuard])}
	var err error
	if g.pins, err = decodePins(rec.Bins[qbPins]); err != nil {
		return g, driver.Errorf(dcsync.Internal, op, "head record: %v", err)
	}
	return g, nil
}

// guardFilter is the filter of a write decided on g: tg unchanged.
func (g trimGuard) filter() *as.Expression {
	return as.ExpEq(binOr0(qbGuard), as.ExpIntVal(int64(g.guard)))
}

// raiseFloor raises partition p's floor towards below, stopping at the offsets of the
// groups that read p and at the live pins (see "Trims against rewinds"). It returns
// the head record as last read (its floor: the floor after the call). *inc is the
// queue's incarnation id (see DeleteQueue), set to the one of the spec read with the
// head record (the queue under the name now: another process may have deleted and
// created it again since this store cached it); the raise is filtered on the head
// record being of it, so that a try that lands late, after the queue was deleted and
// created again, changes nothing.
func (s *Store) raiseFloor(ctx context.Context, op, name string, p int, below uint64, inc *int64) (trimGuard, error) {
	key := s.headKey(name, p)
	for try := 0; ; try++ {
		recs := []as.BatchRecordIfc{as.NewBatchRead(nil, key, guardBins), as.NewBatchRead(nil, s.specKey(name), nil)}
		if err := s.runBatch(ctx, op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
			return trimGuard{}, err
		}
		g, err := guardOf(op, recs[0].BatchRec().Record)
		if err != nil {
			return g, err
		}
		specRec := recs[1].BatchRec().Record
		if specRec != nil {
			*inc = intBinOr0(specRec, qbInc)
		}
		if below > g.head {
			return g, driver.Errorf(dcsync.InvalidArgument, op, "trim of partition %d below %d, beyond its head %d", p, below, g.head)
		}
		if g.floor >= below {
			return g, nil
		}
		if try >= 16 {
			return g, driver.Errorf(dcsync.RetriesExhausted, op, "queue %q partition %d: the floor or the rewinds kept changing", name, p)
		}
		if specRec == nil {
			return g, driver.Errorf(dcsync.NotFound, op, "queue %q does not exist", name)
		}
		spec := specOf(name, specRec.Bins)
		var groups []string
		for i, gr := range spec.Groups {
			if p < spec.Partitions || p == spec.Partitions+i {
				groups = append(groups, gr)
			}
		}
		// The offsets, and the spec again: this read of the spec comes after the head
		// read, so a group it lacks was added after the head read, and its
		// AddQueueGroup's increment of tg refuses this raise (see "Trims against added
		// groups").
		orecs := make([]as.BatchRecordIfc, len(groups), len(groups)+1)
		for i, gr := range groups {
			orecs[i] = as.NewBatchRead(nil, s.offsetKey(name, gr, p), offsetBins)
		}
		orecs = append(orecs, as.NewBatchRead(nil, s.specKey(name), nil))
		if err := s.runBatch(ctx, op, false, orecs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
			return g, err
		}
		again := orecs[len(groups)].BatchRec().Record
		if again == nil {
			return g, driver.Errorf(dcsync.NotFound, op, "queue %q does not exist", name)
		}
		if len(specOf(name, again.Bins).Groups) != len(spec.Groups) {
			continue // a group was added meanwhile: read again
		}
		offs := map[string]driver.QueueOffset{}
		for i, gr := range groups {
			var off driver.QueueOffset
			if br := orecs[i].BatchRec(); br.ResultCode == types.OK && br.Record != nil {
				off = offsetOf(br.Record.Bins)
			}
			offs[gr] = off
		}
		if err := queueHook(name, "trim-offsets-read"); err != nil {
			return g, err
		}
		floor := below
		for _, gr := range groups {
			floor = min(floor, offs[gr].Next)
		}
		var live []rewindPin
		for _, pin := range g.pins {
			if off, ok := offs[pin.group]; !ok || !pin.landed(off) {
				live = append(live, pin)
				floor = min(floor, pin.next)
			}
		}
		if floor <= g.floor {
			return g, nil // held back: nothing more to trim now
		}
		ops := []*as.Operation{
			as.PutOp(as.NewBin(qbFloor, int64(floor))),
			as.PutOp(as.NewBin(qbGuard, int64(g.guard+1))),
		}
		if len(live) != len(g.pins) {
			ops = append(ops, as.PutOp(as.NewBin(qbPins, encodePins(live))))
		}
		_, code, err := s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, as.TTLDontUpdate)
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.FilterExpression = as.ExpAnd(g.filter(), incIs(*inc))
			return wp
		}, key, ops, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT)
		if err != nil {
			return g, err
		}
		if code == types.OK {
			g.floor = floor
			return g, nil
		}
		// Refused (or a retried try found the first one applied): read again (the
		// loop ends once the floor is up to what the offsets allow).
	}
}

// bumpTrimGuards increments tg in the head records of partitions 0..partitions-1 of
// queue name (those every group reads), in one batch write (a command per node): a
// trim whose head read came before has its raise filtered out and reads the spec
// again (see "Trims against added groups"). A head record that is gone (the queue
// deleted meanwhile) is not created (update only). An increment applied twice (a
// retry after an in-doubt try) only refuses a trim more: tg only ever grows.
func (s *Store) bumpTrimGuards(ctx context.Context, op, name string, partitions int) error {
	recs := make([]as.BatchRecordIfc, partitions)
	for p := range recs {
		wp := as.NewBatchWritePolicy()
		wp.RecordExistsAction = as.UPDATE_ONLY
		wp.Expiration = as.TTLDontUpdate // head records never expire
		recs[p] = as.NewBatchWrite(wp, s.headKey(name, p), as.AddOp(as.NewBin(qbGuard, 1)))
	}
	// One command per node (bounded by bytes only; halved if the server refuses).
	return s.runBatchUpTo(ctx, op, true, recs, 0, func(int) int { return 64 }, types.KEY_NOT_FOUND_ERROR)
}

// pinRewind records that group's offset in p moves back to off.Next by the write off,
// which replaces cur, before that write (see "Trims against rewinds"). It returns
// InvalidArgument, having written nothing, when off.Next is below the floor.
func (s *Store) pinRewind(ctx context.Context, op, name, group string, p int, cur, off driver.QueueOffset) error {
	key := s.headKey(name, p)
	pin := rewindPin{group: group, next: off.Next, token: off.Token, version: off.Version}
	inc, err := s.queueInc(ctx, op, name) // cached by CommitQueueOffset's check: no round trip
	if err != nil {
		return err
	}
	for try := 0; try < 16; try++ {
		rec, err := s.getRecord(ctx, op, key)
		if err != nil {
			return err
		}
		g, err := guardOf(op, rec)
		if err != nil {
			return err
		}
		if off.Next < g.floor {
			return driver.Errorf(dcsync.InvalidArgument, op, "queue %q partition %d: the events below seq %d were trimmed; group %q cannot move back to %d", name, p, g.floor, group, off.Next)
		}
		pins := make([]rewindPin, 0, len(g.pins)+1)
		for _, q := range g.pins {
			if q == pin {
				return nil // pinned (an attempt landed, or the same rewind again)
			}
			// A pin of this group that cur shows landed is dead (its write is in cur,
			// or can never land): dropped here, so a group's pins stay those in flight.
			if q.group != group || !q.landed(cur) {
				pins = append(pins, q)
			}
		}
		pins = append(pins, pin)
		_, _, err = s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, as.TTLDontExpire) // head records never expire
			wp.FilterExpression = g.filter()
			return wp
		}, key, withInc([]*as.Operation{
			as.PutOp(as.NewBin(qbPins, encodePins(pins))),
			as.PutOp(as.NewBin(qbGuard, int64(g.guard+1))),
		}, inc), types.FILTERED_OUT)
		if err != nil {
			return err
		}
		// Applied or refused: read again (our pin there ends the loop).
	}
	return driver.Errorf(dcsync.RetriesExhausted, op, "queue %q partition %d: the floor or the rewinds kept changing", name, p)
}
