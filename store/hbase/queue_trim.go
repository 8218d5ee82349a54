package hbase

// # Trims against rewinds
//
// A trim must not delete events that a group's offset, moved back (a rewind: Seek,
// Reset) after the trim's caller read it, still has to deliver. The offsets and the
// Floor live in different rows, which no one HBase call reads and writes together, so
// the head row carries two more cells that both sides compare-and-set:
//
//	q:r  the trim guard: an 8-byte value replaced (check-and-mutate on its exact
//	     bytes) by a fresh random one at every write of q:f or q:w, so a write
//	     decided on a read of the head row lands only if neither changed since
//	q:w  the rewinds in progress (pins): per group, len | group | next | token |
//	     version: a rewind of that group's offset to next, by the write of that token
//	     and version
//
// A rewind (CommitQueueOffset whose Next is below the Next of the cell it replaces)
// first pins: it reads the head row, is refused (InvalidArgument, nothing written)
// when its Next is below the Floor, and otherwise adds its pin to q:w, conditioned on
// q:r. Only then does it write the offset.
//
// A trim reads the head row (and the spec, for the groups), then the offsets of the
// groups that read the partition, and raises q:f to the lowest of below, those
// offsets' Next and the Next of the pins still live, conditioned on the q:r it read.
// A pin is live until the offset it pins shows the pinned write or a later one
// (token, version at least the pin's): then the rewind's write has landed (and the
// offset holds the trim back itself) or can never land (its compare-and-set is on
// bytes that are gone); the trim drops it in the same write.
//
// Why this is enough: a rewind R that returned nil pinned before writing. A trim T
// whose head read came before R's pin finds q:r changed and is refused (it reads
// again), unless T raised the Floor before the pin landed: then R's pin read the
// raised Floor and was refused if below it. A trim whose head read came after R's
// pin either sees the pin live (its Next caps the trim) or sees the offset R wrote
// (it caps the trim). So the Floor never passes a rewound offset; the deletes (trimmed
// marks) below the Floor can land at any time. A pin whose rewind died before its
// offset write stays until the group's offset is written again (by any owner), and
// holds trims back at its Next until then.
//
// # Trims against added groups
//
// The groups a trim waits for come from the spec row, which the raise's
// check-and-mutate (on the head row) cannot condition on. So AddQueueGroup, after its
// write of the spec, increments q:r in the head row of every shared partition (one
// MultiMutate), and a trim reads the spec twice: with the head row (for the groups),
// and again with the offsets, a read that starts after the head read returned; it
// starts over when the second read shows more groups. A group G the trim left out was
// then added after the second read, so after the head read, and G's bump of q:r
// comes after that: the raise (conditioned on the q:r of the head read) lands before
// the bump or not at all, also when it is an attempt sent again that lands late.
// Hence once AddQueueGroup returns, no trim raises the Floor past the new group's
// offset (0): the group's consumers start at the oldest event still stored when it
// returned. (A raise that lands between the spec write and the bump passes 0: it is
// ordered before the add, which is done only when the bump is.) The private
// partition of a group needs no bump: only that group reads it.
//
// # Trims against a queue created again
//
// A trim's writes may land late (delayed in flight), after DeleteQueue deleted the
// queue and CreateQueue created it again under the name (issue 15). None may touch
// the new queue:
//
//   - The raise is conditioned on q:r holding a value drawn at random (top bit set,
//     guardDrawn) by the write that put it, which no queue created again holds (each
//     check-and-mutate is sent once; a value drawn again collides with odds 2^-63).
//     A q:r absent or holding a small count (AddQueueGroup's Increment of an absent
//     q:r, or a release before this one) would match a new queue's: so a raise
//     decided on one first replaces it by a drawn value (a check-and-mutate
//     conditioned on it, one more round trip on a partition's first trim) and is
//     conditioned on that. Applied, it changed only q:r since the head read: the
//     two writes decide as one did.
//   - The record of how far marks went (q:x) is conditioned on that drawn q:r too.
//   - Each trimmed mark is a conditional action ("q:e present") stamped with the
//     newest cell timestamp the trim read (trimGuard.newest: the head row, the spec,
//     the offsets). Every event below the Floor was written before a group's offset
//     passed it (or the Floor that the q:f read was raised over it), so the stamp is
//     at or after the event's (equal: the later write wins); and the reads came
//     before the delete, so before every write of the new queue, whose cells are
//     newer than the stamp. A late mark is then refused where the new queue has no
//     event, and is an older version than the event where it has one (hidden, dropped
//     at compaction). The TTL counts from the stamp: the dedup window plus the time
//     since the stamp on this clock.
//
// The caveat is HBase's, as for DeleteQueue's stamped deletes: a region server whose
// clock is behind could stamp a new event at or before the old trim's stamp.
// TestTrimQueueLateTriesKeepNewQueue holds a trim's writes back and sends them after a
// delete, a create and appends. A rewind pin decided on an absent or counted q:r can
// still land on a new queue: a stale pin, which holds its trims back until the group's
// offset is written again (no event is lost).

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

var (
	qualGuard = []byte("r")
	qualPins  = []byte("w")
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
	var b []byte
	for _, p := range pins {
		b = append(b, byte(len(p.group)))
		b = append(b, p.group...)
		b = binary.BigEndian.AppendUint64(b, p.next)
		b = binary.BigEndian.AppendUint64(b, p.token)
		b = binary.BigEndian.AppendUint64(b, p.version)
	}
	return b
}

func decodePins(b []byte) ([]rewindPin, error) {
	var out []rewindPin
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+24 {
			return nil, fmt.Errorf("pins cell truncated")
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

// trimGuard is the head row as a trim or a rewind decides on it.
type trimGuard struct {
	bounds  driver.QueueBounds
	trimmed uint64      // q:x
	guard   []byte      // q:r as read (nil: absent)
	pins    []rewindPin // q:w
	// newest is the newest timestamp of the cells read (the head row's; raiseFloor
	// adds the spec's and the offsets'): at or after the write of every event below
	// the Floor, before the write of any event of a queue created again under the
	// name (see "Trims against a queue created again").
	newest int64
}

var guardCols = []hbaserpc.Column{
	{Family: famQueue, Qualifier: qualHead}, {Family: famQueue, Qualifier: qualFloor},
	{Family: famQueue, Qualifier: qualTrimmed}, {Family: famQueue, Qualifier: qualGuard},
	{Family: famQueue, Qualifier: qualPins},
}

func decodeGuard(op string, cells []hbaserpc.Cell) (trimGuard, error) {
	var g trimGuard
	var err error
	if g.bounds, err = decodeBounds(op, cells); err != nil {
		return g, err
	}
	if g.trimmed, err = cellUint(cells, qualTrimmed); err != nil {
		return g, driver.Errorf(dcsync.Internal, op, "head row: %v", err)
	}
	if raw, _, ok := cellValue(cells, qualGuard); ok && len(raw) > 0 {
		g.guard = raw
	}
	if raw, _, ok := cellValue(cells, qualPins); ok {
		if g.pins, err = decodePins(raw); err != nil {
			return g, driver.Errorf(dcsync.Internal, op, "head row: %v", err)
		}
	}
	g.newest = newestCell(cells)
	return g, nil
}

// newestCell returns the newest timestamp among cells (0: none).
func newestCell(cells []hbaserpc.Cell) int64 {
	var ts int64
	for _, c := range cells {
		ts = max(ts, c.Timestamp)
	}
	return ts
}

// cond is the condition of a write decided on g: q:r unchanged.
func (g trimGuard) cond() hbaserpc.Condition {
	if g.guard == nil {
		return hbaserpc.IfAbsent(famQueue, qualGuard)
	}
	return hbaserpc.IfEquals(famQueue, qualGuard, g.guard)
}

// guardDrawn is the top bit of every q:r value a trim or a rewind writes (next).
const guardDrawn = 1 << 63

// unique reports whether g's q:r is a value no queue created again under the name can
// hold (see "Trims against a queue created again"): drawn at random by next (or such
// a value incremented by AddQueueGroup's bumps), not absent nor a small count (an
// Increment of an absent q:r, or a release before this one counting from 0).
func (g trimGuard) unique() bool {
	return len(g.guard) == 8 && binary.BigEndian.Uint64(g.guard)&guardDrawn != 0
}

// next is the value of q:r that a write decided on g puts: a fresh random value (top
// bit set), so that a value once replaced never comes back, in this queue or in one
// created again under its name.
func (g trimGuard) next() []byte {
	return be64(randToken() | guardDrawn)
}

// raiseFloor raises partition p's Floor towards below, stopping at the offsets of the
// groups that read p and at the live pins (see "Trims against rewinds"). It returns
// the head row as last read (its Floor: the Floor after the call).
func (s *Store) raiseFloor(ctx context.Context, db queueOps, table, op, name string, p int, below uint64) (trimGuard, error) {
	hrow := headRow(name, p)
	for try := 0; ; try++ {
		rows, err := db.MultiGet(ctx, table, []hbaserpc.Get{{Row: hrow, Columns: guardCols},
			{Row: specRow(name), Columns: []hbaserpc.Column{{Family: famQueue, Qualifier: qualSpec}}}})
		if err != nil {
			return trimGuard{}, wrap(err, op)
		}
		g, err := decodeGuard(op, rows[0])
		if err != nil {
			return g, err
		}
		if below > g.bounds.Head {
			return g, driver.Errorf(dcsync.InvalidArgument, op, "trim below %d beyond head %d of queue %q partition %d", below, g.bounds.Head, name, p)
		}
		if g.bounds.Floor >= below {
			return g, nil
		}
		if try >= 4*maxTries {
			return g, driver.Errorf(dcsync.RetriesExhausted, op, "queue %q partition %d: the floor or the rewinds kept changing", name, p)
		}
		spec, err := decodeSpecCell(op, name, rows[1])
		if err != nil {
			return g, err
		}
		g.newest = max(g.newest, newestCell(rows[1]))
		var groups []string
		for i, gr := range spec.Groups {
			if p < spec.Partitions || p == spec.Partitions+i {
				groups = append(groups, gr)
			}
		}
		// The offsets, and the spec again: this read of the spec comes after the head
		// read, so a group it lacks was added after the head read, and its
		// AddQueueGroup's bump of q:r refuses this raise (see "Trims against added
		// groups").
		gets := make([]hbaserpc.Get, len(groups), len(groups)+1)
		for i, gr := range groups {
			gets[i] = hbaserpc.Get{Row: offsetRow(name, gr, p), Columns: []hbaserpc.Column{offsetColumn}}
		}
		gets = append(gets, hbaserpc.Get{Row: specRow(name), Columns: []hbaserpc.Column{{Family: famQueue, Qualifier: qualSpec}}})
		orows, err := db.MultiGet(ctx, table, gets)
		if err != nil {
			return g, wrap(err, op)
		}
		again, err := decodeSpecCell(op, name, orows[len(groups)])
		if err != nil {
			return g, err
		}
		if len(again.Groups) != len(spec.Groups) {
			continue // a group was added meanwhile: read again
		}
		offs := map[string]driver.QueueOffset{}
		for i, cells := range orows[:len(groups)] {
			if offs[groups[i]], _, err = offsetOf(op, cells); err != nil {
				return g, err
			}
			g.newest = max(g.newest, newestCell(cells))
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
		if floor <= g.bounds.Floor {
			return g, nil // held back: nothing more to trim now
		}
		if !g.unique() {
			// q:r absent or a small count, which a queue created again under the name
			// may hold too: first replace it by a drawn value (conditioned on it), and
			// condition the raise on that (see "Trims against a queue created again").
			// Applied, nothing of the head row changed since the read but q:r.
			drawn := g.next()
			ok, _, err := db.CheckAndMutate(ctx, table, hrow, g.cond(), &hbaserpc.Put{Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualGuard, Value: drawn}}})
			if err != nil && !inDoubt(err) {
				return g, wrap(err, op)
			}
			if err != nil || !ok {
				continue // refused or in doubt: read again
			}
			g.guard = drawn
		}
		vals := []hbaserpc.Value{{Family: famQueue, Qualifier: qualFloor, Value: be64(floor)}, {Family: famQueue, Qualifier: qualGuard, Value: g.next()}}
		if len(live) != len(g.pins) {
			vals = append(vals, hbaserpc.Value{Family: famQueue, Qualifier: qualPins, Value: encodePins(live)})
		}
		ok, _, err := db.CheckAndMutate(ctx, table, hrow, g.cond(), &hbaserpc.Put{Values: vals})
		if err != nil && !inDoubt(err) {
			return g, wrap(err, op)
		}
		if err == nil && ok {
			g.bounds.Floor = floor
			return g, nil
		}
		// Refused or in doubt: read again (the loop ends once the floor is up to what
		// the offsets allow).
	}
}

// bumpTrimGuards increments q:r in the head rows of partitions 0..partitions-1 of
// queue name (those every group reads), in one MultiMutate (a Multi RPC per region
// server): a trim whose head read came before is refused and reads the spec again
// (see "Trims against added groups"). A head row that is gone (the queue deleted
// meanwhile) is left alone: each Increment is conditioned on its q:h. The Increments
// are nonce'd: one sent again after a lost reply is not applied twice, and one
// applied twice would only refuse a trim more (an Increment never brings back a value
// q:r held).
func bumpTrimGuards(ctx context.Context, db queueOps, table, op, name string, partitions int) error {
	acts := make([]hbaserpc.Action, partitions)
	present := hbaserpc.IfPresent(famQueue, qualHead)
	for p := range acts {
		acts[p] = hbaserpc.Action{Cond: &present, Mutation: &hbaserpc.Increment{Row: headRow(name, p),
			Deltas: []hbaserpc.Delta{{Family: famQueue, Qualifier: qualGuard, Amount: 1}}}}
	}
	res, err := db.MultiMutate(ctx, table, acts)
	if err != nil {
		return wrap(err, op)
	}
	for _, r := range res {
		if r.Err != nil {
			return wrap(r.Err, op)
		}
	}
	return nil
}

// decodeSpecCell decodes the spec row's cells (NotFound when there is none, or when
// it holds a deletion mark: the queue reads as deleted, see isDeleting).
func decodeSpecCell(op, name string, cells []hbaserpc.Cell) (driver.QueueSpec, error) {
	v, ts, ok := cellValue(cells, qualSpec)
	if !ok || isDeleting(v) {
		return driver.QueueSpec{}, driver.Errorf(dcsync.NotFound, op, "queue %q not found", name)
	}
	var d specDoc
	if err := json.Unmarshal(v, &d); err != nil {
		return driver.QueueSpec{}, driver.Errorf(dcsync.Internal, op, "queue %q: bad spec: %v", name, err)
	}
	if d.Name != name {
		return driver.QueueSpec{}, driver.Errorf(dcsync.Internal, op, "spec row of queue %q holds queue %q", name, d.Name)
	}
	return d.spec(ts), nil
}

// pinRewind records that group's offset in p moves back to off.Next by the write off,
// which replaces cur, before that write (see "Trims against rewinds"). It returns
// InvalidArgument, having written nothing, when off.Next is below the Floor.
func (s *Store) pinRewind(ctx context.Context, db queueOps, table, op, name, group string, p int, cur, off driver.QueueOffset) error {
	hrow := headRow(name, p)
	pin := rewindPin{group: group, next: off.Next, token: off.Token, version: off.Version}
	for try := 0; try < 4*maxTries; try++ {
		cells, err := db.Get(ctx, table, hrow, guardCols...)
		if err != nil {
			return wrap(err, op)
		}
		g, err := decodeGuard(op, cells)
		if err != nil {
			return err
		}
		if off.Next < g.bounds.Floor {
			return driver.Errorf(dcsync.InvalidArgument, op, "queue %q partition %d: the events below seq %d were trimmed; group %q cannot move back to %d", name, p, g.bounds.Floor, group, off.Next)
		}
		pins := make([]rewindPin, 0, len(g.pins)+1)
		for _, q := range g.pins {
			if q == pin {
				return nil // pinned (an attempt in doubt landed, or the same rewind again)
			}
			// A pin of this group that cur shows landed is dead (its write is in cur,
			// or can never land): dropped here, so a group's pins stay those in flight.
			if q.group != group || !q.landed(cur) {
				pins = append(pins, q)
			}
		}
		pins = append(pins, pin)
		_, _, err = db.CheckAndMutate(ctx, table, hrow, g.cond(), &hbaserpc.Put{Values: []hbaserpc.Value{
			{Family: famQueue, Qualifier: qualPins, Value: encodePins(pins)},
			{Family: famQueue, Qualifier: qualGuard, Value: g.next()},
		}})
		if err != nil && !inDoubt(err) {
			return wrap(err, op)
		}
		// Applied, refused or in doubt: read again (our pin there ends the loop).
	}
	return driver.Errorf(dcsync.RetriesExhausted, op, "queue %q partition %d: the floor or the rewinds kept changing", name, p)
}
