package hbase

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// AppendQueue appends events (see the queue layout in queue.go): one MultiGet of the
// dedup rows of the events with ids, one MultiMutate of the reservations (an Increment
// per partition), one of the dedup claims, one of the entries (conditional "absent"
// puts); the rare paths (an id already there, an aborted seq, a lost reply) go round
// again.
func (s *Store) AppendQueue(ctx context.Context, name string, events []dcsync.QueueEvent) ([]dcsync.QueueAppend, error) {
	const op = "hbase.AppendQueue"
	if err := dcsync.ValidateID("queue", name); err != nil {
		return nil, err
	}
	if err := dcsync.ValidateQueueEvents(events); err != nil {
		return nil, err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return nil, err
	}
	spec, err := s.knownSpec(ctx, db, table, op, name)
	if err != nil {
		return nil, err
	}
	a := &appender{s: s, db: db, table: table, name: name, op: op, window: spec.DedupWindow(), token: randToken(),
		events: events, res: make([]dcsync.QueueAppend, len(events)), done: make([]bool, len(events)),
		seq: make([]uint64, len(events)), dedupOld: make([][]byte, len(events))}
	if err := a.run(ctx); err != nil {
		return nil, err
	}
	return a.res, nil
}

// appendTestHook, when set (tests only), runs after each round's reservation.
var appendTestHook atomic.Pointer[func(a *appender, round int, idx []int)]

// appender is one AppendQueue call.
type appender struct {
	s      *Store
	db     queueOps
	table  string
	name   string
	op     string
	window time.Duration // the dedup rows' cell TTL
	token  uint64        // marks every entry and dedup claim this call writes

	events   []dcsync.QueueEvent
	res      []dcsync.QueueAppend
	done     []bool
	seq      []uint64 // the current reservation of each pending event
	dedupOld [][]byte // the dedup value to take over from (nil: claim if absent)
	unused   []slot   // reserved seqs that will not get their event: tombstoned
}

// slot is one seq of one partition.
type slot struct {
	p   int
	seq uint64
}

// reserve gives every event in idx a fresh seq: one Increment of each partition's
// head by its number of events, in one MultiMutate; seqs follow the order of idx.
func (a *appender) reserve(ctx context.Context, idx []int) error {
	var parts []int
	count := map[int]int{}
	for _, i := range idx {
		p := a.events[i].Partition
		if count[p] == 0 {
			parts = append(parts, p)
		}
		count[p]++
	}
	acts := make([]hbaserpc.Action, len(parts))
	for k, p := range parts {
		acts[k] = hbaserpc.Action{Mutation: &hbaserpc.Increment{Row: headRow(a.name, p),
			Deltas: []hbaserpc.Delta{{Family: famQueue, Qualifier: qualHead, Amount: int64(count[p])}}}}
	}
	res, err := a.db.MultiMutate(ctx, a.table, acts)
	if err != nil {
		return wrap(err, a.op)
	}
	next := map[int]uint64{}
	for k, p := range parts {
		if len(res[k].Cells) != 1 {
			return dcsync.Errorf(dcsync.Internal, a.op, "reservation of partition %d returned %d cells", p, len(res[k].Cells))
		}
		h, err := decode64(a.op, res[k].Cells[0])
		if err != nil {
			return err
		}
		if h < int64(count[p]) {
			return dcsync.Errorf(dcsync.Internal, a.op, "partition %d head %d after reserving %d", p, h, count[p])
		}
		next[p] = uint64(h) - uint64(count[p])
	}
	for _, i := range idx {
		p := a.events[i].Partition
		a.seq[i] = next[p]
		next[p]++
	}
	return nil
}

func encodeDedup(p int, seq, token uint64) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(p))
	b = binary.BigEndian.AppendUint64(b, seq)
	return binary.BigEndian.AppendUint64(b, token)
}

func decodeDedup(v []byte) (p int, seq, token uint64, err error) {
	if len(v) != 18 {
		return 0, 0, 0, fmt.Errorf("dedup cell holds %d bytes, want 18", len(v))
	}
	return int(binary.BigEndian.Uint16(v)), binary.BigEndian.Uint64(v[2:]), binary.BigEndian.Uint64(v[10:]), nil
}

func (a *appender) dedupCol() []hbaserpc.Column {
	return []hbaserpc.Column{{Family: famQueue, Qualifier: qualDedup}}
}

// readDedup reads the dedup cells of the events in idx.
func (a *appender) readDedup(ctx context.Context, idx []int) ([][]byte, error) {
	gets := make([]hbaserpc.Get, len(idx))
	for k, i := range idx {
		gets[k] = hbaserpc.Get{Row: dedupRow(a.name, a.events[i].ID), Columns: a.dedupCol()}
	}
	rows, err := a.db.MultiGet(ctx, a.table, gets)
	if err != nil {
		return nil, wrap(err, a.op)
	}
	out := make([][]byte, len(idx))
	for k, cells := range rows {
		if v, _, ok := cellValue(cells, qualDedup); ok {
			out[k] = v
		}
	}
	return out, nil
}

// outcome of resolving an id that is already in the dedup table.
type outcome int

const (
	outDuplicate outcome = iota // res[i] is set
	outTakeover                 // the id's seq was aborted: append with a fresh seq
)

// resolve decides event i whose id's dedup row holds dval (see the layout: an event
// there is a Duplicate; a tombstone lets this append take the id over; nothing yet is
// completed by this append, or was trimmed after delivery).
func (a *appender) resolve(ctx context.Context, i int, dval []byte) (outcome, error) {
	p, seq, _, err := decodeDedup(dval)
	if err != nil {
		return 0, dcsync.Errorf(dcsync.Internal, a.op, "event id %q: %v", a.events[i].ID, err)
	}
	if err := dcsync.ValidateQueuePartition(p); err != nil {
		return 0, dcsync.Errorf(dcsync.Internal, a.op, "event id %q: dedup row names partition %d", a.events[i].ID, p)
	}
	dup := func() (outcome, error) {
		a.res[i] = dcsync.QueueAppend{Partition: p, Seq: seq, Duplicate: true}
		a.done[i] = true
		return outDuplicate, nil
	}
	row := entryRow(partPrefix(a.name, p), seq)
	rows, err := a.db.MultiGet(ctx, a.table, []hbaserpc.Get{
		{Row: row, Columns: entryCols},
		{Row: headRow(a.name, p), Columns: headCols},
	})
	if err != nil {
		return 0, wrap(err, a.op)
	}
	e, found, err := findEntry(rows[0])
	if err != nil {
		return 0, dcsync.Errorf(dcsync.Internal, a.op, "partition %d seq %d: %v", p, seq, err)
	}
	if found {
		if e.kind == kindTombstone {
			return outTakeover, nil
		}
		return dup()
	}
	b, err := decodeBounds(a.op, rows[1])
	if err != nil {
		return 0, err
	}
	if seq < b.Floor {
		return dup() // delivered and trimmed (tombstones are never trimmed)
	}
	// Reserved by the first append of the id, not written: its writer died, or is
	// still writing. Write the event there ourselves (either write stores the id's one
	// event), unless the seq was aborted.
	put := a.entryPut(i)
	put.Row = row
	res, err := a.db.MultiMutate(ctx, a.table, []hbaserpc.Action{{Mutation: put, Read: abortCols}})
	if err != nil {
		return 0, wrap(err, a.op)
	}
	if aborted(res[0].Read) {
		return outTakeover, nil
	}
	return dup()
}

// abortCols is what a write reads back: the tombstone, if any.
var abortCols = []hbaserpc.Column{{Family: famQueue, Qualifier: qualAbort}}

func aborted(cells []hbaserpc.Cell) bool {
	_, _, ok := cellValue(cells, qualAbort)
	return ok
}

func (a *appender) entryPut(i int) *hbaserpc.Put {
	return &hbaserpc.Put{Values: []hbaserpc.Value{
		{Family: famQueue, Qualifier: qualEntry, Value: encodeEvent(a.events[i])},
		{Family: famQueue, Qualifier: qualMark, Value: []byte{1}},
	}}
}

func (a *appender) run(ctx context.Context) error {
	n := len(a.events)
	// Ids repeated within the batch: later ones are duplicates of the first.
	dupOf := make([]int, n)
	first := map[string]int{}
	var pending, withID []int
	for i, e := range a.events {
		dupOf[i] = -1
		if e.ID != "" {
			if j, ok := first[e.ID]; ok {
				dupOf[i] = j
				continue
			}
			first[e.ID] = i
			withID = append(withID, i)
		}
		pending = append(pending, i)
	}
	// Ids already in the queue.
	if len(withID) > 0 {
		vals, err := a.readDedup(ctx, withID)
		if err != nil {
			return err
		}
		for k, i := range withID {
			if vals[k] == nil {
				continue
			}
			out, err := a.resolve(ctx, i, vals[k])
			if err != nil {
				return err
			}
			if out == outTakeover {
				a.dedupOld[i] = vals[k]
			}
		}
	}
	for round := 0; ; round++ {
		var todo []int
		for _, i := range pending {
			if !a.done[i] {
				todo = append(todo, i)
			}
		}
		if len(todo) == 0 {
			break
		}
		if round >= 2*maxTries {
			return dcsync.Errorf(dcsync.RetriesExhausted, a.op, "%d events still not appended after %d rounds (seqs aborted under them)", len(todo), round)
		}
		if err := a.reserve(ctx, todo); err != nil {
			return err
		}
		if h := appendTestHook.Load(); h != nil {
			(*h)(a, round, todo)
		}
		claimed, err := a.claim(ctx, todo)
		if err != nil {
			return err
		}
		if err := a.write(ctx, claimed); err != nil {
			return err
		}
	}
	for i, j := range dupOf {
		if j >= 0 {
			a.res[i] = dcsync.QueueAppend{Partition: a.res[j].Partition, Seq: a.res[j].Seq, Duplicate: true}
		}
	}
	return nil
}

// claim records the reservations of the events with ids in their dedup rows (claim
// if absent, or take over from the aborted value), and returns the events to write.
// An event that lost its id to another append gives up its seq (tombstoned by write).
func (a *appender) claim(ctx context.Context, todo []int) ([]int, error) {
	var ready, ids []int
	for _, i := range todo {
		if a.events[i].ID == "" {
			ready = append(ready, i)
		} else {
			ids = append(ids, i)
		}
	}
	if len(ids) == 0 {
		return ready, nil
	}
	for try := 0; len(ids) > 0; try++ {
		if try > maxTries {
			return nil, dcsync.Errorf(dcsync.RetriesExhausted, a.op, "%d dedup claims still in doubt after %d attempts", len(ids), try)
		}
		acts := make([]hbaserpc.Action, len(ids))
		mine := make([][]byte, len(ids))
		for k, i := range ids {
			e := a.events[i]
			mine[k] = encodeDedup(e.Partition, a.seq[i], a.token)
			cond := hbaserpc.IfAbsent(famQueue, qualDedup)
			if a.dedupOld[i] != nil {
				cond = hbaserpc.IfEquals(famQueue, qualDedup, a.dedupOld[i])
			}
			acts[k] = hbaserpc.Action{Cond: &cond, Mutation: &hbaserpc.Put{Row: dedupRow(a.name, e.ID), TTL: a.window,
				Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualDedup, Value: mine[k]}}}}
		}
		res, err := a.db.MultiMutate(ctx, a.table, acts)
		if res == nil {
			return nil, wrap(err, a.op)
		}
		var check, checkK []int // refused or in doubt: read the dedup row
		for k, r := range res {
			switch {
			case r.Err == nil && r.Applied:
				ready = append(ready, ids[k])
			case r.Err == nil || inDoubt(r.Err):
				check = append(check, ids[k])
				checkK = append(checkK, k)
			default:
				return nil, wrap(r.Err, a.op)
			}
		}
		ids = nil
		if len(check) == 0 {
			break
		}
		vals, err := a.readDedup(ctx, check)
		if err != nil {
			return nil, err
		}
		for c, i := range check {
			v := vals[c]
			switch {
			case v != nil && string(v) == string(mine[checkK[c]]):
				ready = append(ready, i) // our claim, whose reply was lost
			case v == nil:
				// Not applied (in doubt), or the value we took over from expired:
				// claim again with the same seq.
				a.dedupOld[i] = nil
				ids = append(ids, i)
			default:
				// The id is another append's: our reserved seq goes unused.
				a.unused = append(a.unused, slot{a.events[i].Partition, a.seq[i]})
				out, err := a.resolve(ctx, i, v)
				if err != nil {
					return nil, err
				}
				a.dedupOld[i] = nil
				if out == outTakeover {
					a.dedupOld[i] = v
				}
			}
		}
	}
	return ready, nil
}

// write stores the claimed events at their seqs and tombstones the unused seqs, in
// one MultiMutate. An event is a plain Put of its entry read back in the same request:
// a tombstone there (the consumer aborted the seq before the write: AbortQueueSeq
// writes it only while q:e is absent, atomically) means nobody reads the event at
// that seq, and it is left pending (with the dedup value to take over from) for the
// next round; otherwise it is stored, for good. Writes whose outcome is unknown are
// sent again (a Put and its read-back are idempotent).
func (a *appender) write(ctx context.Context, idx []int) error {
	unused := a.unused
	a.unused = nil
	cond := hbaserpc.IfAbsent(famQueue, qualEntry)
	var last error
	for try := 0; len(idx) > 0 || len(unused) > 0; try++ {
		if try > maxTries {
			return dcsync.Errorf(dcsync.Connection, a.op, "%d entries written with unknown outcome %d times: %w", len(idx), try, last)
		}
		acts := make([]hbaserpc.Action, 0, len(idx)+len(unused))
		for _, i := range idx {
			put := a.entryPut(i)
			put.Row = entryRow(partPrefix(a.name, a.events[i].Partition), a.seq[i])
			acts = append(acts, hbaserpc.Action{Mutation: put, Read: abortCols})
		}
		// Tombstones of unused seqs are best effort: a consumer aborts a hole anyway.
		for _, u := range unused {
			acts = append(acts, hbaserpc.Action{Cond: &cond, Mutation: abortPut(entryRow(partPrefix(a.name, u.p), u.seq))})
		}
		unused = nil
		res, err := a.db.MultiMutate(ctx, a.table, acts)
		if res == nil {
			return wrap(err, a.op)
		}
		var again []int
		for k, i := range idx {
			r := res[k]
			switch {
			case r.Err == nil && aborted(r.Read):
				a.s.log.Debug("hbase: queue seq aborted before its write; appending again", "queue", a.name, "partition", a.events[i].Partition, "seq", a.seq[i])
				if a.events[i].ID != "" {
					a.dedupOld[i] = encodeDedup(a.events[i].Partition, a.seq[i], a.token)
				}
			case r.Err == nil:
				a.finish(i)
			case inDoubt(r.Err):
				again = append(again, i)
				last = r.Err
			default:
				return wrap(r.Err, a.op)
			}
		}
		idx = again
	}
	return nil
}

func (a *appender) finish(i int) {
	a.res[i] = dcsync.QueueAppend{Partition: a.events[i].Partition, Seq: a.seq[i]}
	a.done[i] = true
}
