package hbase

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// AppendQueue appends events (see the queue layout in queue.go). Events without ids
// take two round trips: one MultiMutate of the reservations (an Increment per
// partition), one of the entries (Puts read back). Events with ids take two more:
// their dedup rows are claimed before the reservation and pointed at their seqs after
// it. The rare paths (an id already there, a claim of a writer that died, an aborted
// seq, a lost reply) go round again.
func (s *Store) AppendQueue(ctx context.Context, name string, events []driver.QueueEvent) ([]driver.QueueAppend, error) {
	const op = "hbase.AppendQueue"
	if err := driver.ValidateID("queue", name); err != nil {
		return nil, err
	}
	if err := driver.ValidateQueueEvents(events); err != nil {
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
	a := newAppender(s, db, table, name, op, spec.DedupWindow(), events)
	if err := a.run(ctx); err != nil {
		return nil, err
	}
	return a.res, nil
}

// claimTimeout is how long a pending dedup claim (an append of the id that claimed it
// and has not reserved its seq yet) is waited for before another append of the id
// takes it over (its writer is presumed dead). A var for tests.
var claimTimeout = 5 * time.Second

// appendTestHook, when set (tests only), runs after each round's reservation.
var appendTestHook atomic.Pointer[func(a *appender, round int, idx []int)]

// How write verifies that no event's seq was aborted before its Put (see write).
const (
	verifyAuto     = iota // read back small batches, scan large ones
	verifyReadBack        // each row read back in the Puts' request
	verifyScan            // one scan per partition after the Puts
)

// appendVerify (tests and benchmarks only) forces one way of verifying.
var appendVerify atomic.Int32

// appender is one AppendQueue call.
type appender struct {
	s      *Store
	db     queueOps
	table  string
	name   string
	op     string
	window time.Duration // the dedup rows' cell TTL
	token  uint64        // marks every dedup claim this call writes

	events  []driver.QueueEvent
	res     []driver.QueueAppend
	done    []bool
	seq     []uint64 // the current reservation of each pending event
	claimed []bool   // the event's id is claimed by this call (pending or at its seq)
	waiting []bool   // the event's id is pending for another call
	// waitVal and waitSince are the other call's pending value and when it was first
	// seen (to take it over after claimTimeout).
	waitVal   [][]byte
	waitSince []time.Time
	// dedupOld is the dedup value to take the id over from (nil: claim if absent).
	dedupOld [][]byte
	unused   []slot // reserved seqs that will not get their event: tombstoned
}

func newAppender(s *Store, db queueOps, table, name, op string, window time.Duration, events []driver.QueueEvent) *appender {
	n := len(events)
	return &appender{s: s, db: db, table: table, name: name, op: op, window: window, token: randToken(),
		events: events, res: make([]driver.QueueAppend, n), done: make([]bool, n),
		seq: make([]uint64, n), claimed: make([]bool, n), waiting: make([]bool, n),
		waitVal: make([][]byte, n), waitSince: make([]time.Time, n), dedupOld: make([][]byte, n)}
}

// slot is one seq of one partition.
type slot struct {
	p   int
	seq uint64
}

// Dedup values: an id claimed by an append that has not reserved its seq yet
// (pending), or the id's partition and seq; both name the claiming call's token.
const pendingMark = 0xFFFF

func encodeDedup(p int, seq, token uint64) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(p))
	b = binary.BigEndian.AppendUint64(b, seq)
	return binary.BigEndian.AppendUint64(b, token)
}

func encodePending(token uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint16(nil, pendingMark), token)
}

// decodeDedup decodes a dedup value; pending reports a claim without a seq yet.
func decodeDedup(v []byte) (p int, seq, token uint64, pending bool, err error) {
	switch {
	case len(v) == 10 && binary.BigEndian.Uint16(v) == pendingMark:
		return 0, 0, binary.BigEndian.Uint64(v[2:]), true, nil
	case len(v) == 18:
		return int(binary.BigEndian.Uint16(v)), binary.BigEndian.Uint64(v[2:]), binary.BigEndian.Uint64(v[10:]), false, nil
	}
	return 0, 0, 0, false, fmt.Errorf("dedup cell holds %d bytes", len(v))
}

// reserve gives every event in idx a fresh seq: one Increment of each partition's
// head by its number of events, in one MultiMutate; seqs follow the order of idx.
//
// An Increment whose reply was lost is resent with its nonce, so it is applied once;
// but when the lost attempt had been applied, HBase answers the resent one with the
// head's current value, which may include other producers' reservations since: the
// range is unknown. Such a reservation (MultiMutate marks it Resent) is abandoned, its
// seqs left as holes for the consumer to abort, and the partition reserved again.
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
	next := map[int]uint64{}
	for try := 0; len(parts) > 0; try++ {
		if try > maxTries {
			return driver.Errorf(dcsync.Connection, a.op, "reservations of %d partitions kept failing with unknown outcome", len(parts))
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
		var again []int
		for k, p := range parts {
			if res[k].Resent {
				a.s.log.Debug("hbase: queue reservation resent after a lost reply; its seqs are left as holes", "queue", a.name, "partition", p, "count", count[p])
				again = append(again, p)
				continue
			}
			if len(res[k].Cells) != 1 {
				return driver.Errorf(dcsync.Internal, a.op, "reservation of partition %d returned %d cells", p, len(res[k].Cells))
			}
			h, err := decode64(a.op, res[k].Cells[0])
			if err != nil {
				return err
			}
			if h < int64(count[p]) {
				return driver.Errorf(dcsync.Internal, a.op, "partition %d head %d after reserving %d", p, h, count[p])
			}
			next[p] = uint64(h) - uint64(count[p])
			a.s.sawHead(a.name, p, uint64(h))
		}
		parts = again
	}
	for _, i := range idx {
		p := a.events[i].Partition
		a.seq[i] = next[p]
		next[p]++
	}
	return nil
}

var dedupCols = []hbaserpc.Column{{Family: famQueue, Qualifier: qualDedup}}

// readDedup reads the dedup cells of the events in idx: values and timestamps.
func (a *appender) readDedup(ctx context.Context, idx []int) ([][]byte, []int64, error) {
	gets := make([]hbaserpc.Get, len(idx))
	for k, i := range idx {
		gets[k] = hbaserpc.Get{Row: dedupRow(a.name, a.events[i].ID), Columns: dedupCols}
	}
	rows, err := a.db.MultiGet(ctx, a.table, gets)
	if err != nil {
		return nil, nil, wrap(err, a.op)
	}
	out := make([][]byte, len(idx))
	ts := make([]int64, len(idx))
	for k, cells := range rows {
		if v, t, ok := cellValue(cells, qualDedup); ok {
			out[k], ts[k] = v, t
		}
	}
	return out, ts, nil
}

// outcome of resolving an id that is already at a seq.
type outcome int

const (
	outDuplicate outcome = iota // res[i] is set
	outTakeover                 // the id's seq was aborted: append with a fresh seq
)

// resolve decides event i whose id's dedup row points at a seq (value dval): an event
// there is a Duplicate; a tombstone lets this append take the id over; nothing yet is
// written by this append itself (read back: aborted meanwhile is a takeover) and is a
// Duplicate of that seq; nothing below the Floor was trimmed after delivery.
func (a *appender) resolve(ctx context.Context, i int, dval []byte) (outcome, error) {
	p, seq, _, _, err := decodeDedup(dval)
	if err != nil {
		return 0, driver.Errorf(dcsync.Internal, a.op, "event id %q: %v", a.events[i].ID, err)
	}
	if err := driver.ValidateQueuePartition(p); err != nil {
		return 0, driver.Errorf(dcsync.Internal, a.op, "event id %q: dedup row names partition %d", a.events[i].ID, p)
	}
	dup := func() (outcome, error) {
		a.res[i] = driver.QueueAppend{Partition: p, Seq: seq, Duplicate: true}
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
		return 0, driver.Errorf(dcsync.Internal, a.op, "partition %d seq %d: %v", p, seq, err)
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
	}}
}

func (a *appender) run(ctx context.Context) error {
	n := len(a.events)
	// Ids repeated within the batch: later ones are duplicates of the first.
	dupOf := make([]int, n)
	first := map[string]int{}
	var pending []int
	for i, e := range a.events {
		dupOf[i] = -1
		if e.ID != "" {
			if j, ok := first[e.ID]; ok {
				dupOf[i] = j
				continue
			}
			first[e.ID] = i
		}
		pending = append(pending, i)
	}
	delay := time.Millisecond
	start := time.Now()
	for rounds := 0; ; {
		var todo, claim []int
		for _, i := range pending {
			if a.done[i] {
				continue
			}
			todo = append(todo, i)
			if a.events[i].ID != "" && !a.claimed[i] {
				claim = append(claim, i)
			}
		}
		if len(todo) == 0 {
			break
		}
		if rounds >= 2*maxTries {
			return driver.Errorf(dcsync.RetriesExhausted, a.op, "%d events still not appended after %d rounds (seqs aborted under them)", len(todo), rounds)
		}
		if err := a.claim(ctx, claim); err != nil {
			return err
		}
		var ready []int
		for _, i := range todo {
			if !a.done[i] && (a.events[i].ID == "" || a.claimed[i]) {
				ready = append(ready, i)
			}
		}
		if len(ready) == 0 {
			// Every id left is pending for other calls: give them time.
			if time.Since(start) > 4*claimTimeout+time.Minute {
				return driver.Errorf(dcsync.RetriesExhausted, a.op, "event ids stayed claimed by other appends for %v", time.Since(start))
			}
			if err := sleepCtx(ctx, delay); err != nil {
				return ctxErr(ctx, a.op)
			}
			delay = min(2*delay, 50*time.Millisecond)
			continue
		}
		rounds++
		delay = time.Millisecond
		if err := a.reserve(ctx, ready); err != nil {
			return err
		}
		if h := appendTestHook.Load(); h != nil {
			(*h)(a, rounds-1, ready)
		}
		placed, err := a.place(ctx, ready)
		if err != nil {
			return err
		}
		if err := a.write(ctx, placed); err != nil {
			return err
		}
	}
	for i, j := range dupOf {
		if j >= 0 {
			a.res[i] = driver.QueueAppend{Partition: a.res[j].Partition, Seq: a.res[j].Seq, Duplicate: true}
		}
	}
	return nil
}

// claim claims the ids of the events in idx for this call (a pending dedup value),
// before any seq is reserved for them, so that appends of one id racing each other
// never reserve a seq they then leave unused. An id already at a seq is resolved
// (Duplicate, or taken over when its seq was aborted). An id pending for another call
// is left unclaimed (waiting) for a later round, never waited for here: a call
// holding claims of its own goes on to place them, so calls claiming overlapping ids
// in different orders cannot wait for each other; once an id has been pending for
// claimTimeout (its writer died) it is taken over.
func (a *appender) claim(ctx context.Context, idx []int) error {
	mine := encodePending(a.token)
	var send, check []int
	for _, i := range idx {
		if a.waiting[i] {
			check = append(check, i) // pending for another call: look again
		} else {
			send = append(send, i)
		}
	}
	for try := 0; len(send) > 0 || len(check) > 0; try++ {
		if try > 4*maxTries {
			return driver.Errorf(dcsync.RetriesExhausted, a.op, "%d event ids could not be claimed", len(send)+len(check))
		}
		if len(send) > 0 {
			acts := make([]hbaserpc.Action, len(send))
			for k, i := range send {
				cond := hbaserpc.IfAbsent(famQueue, qualDedup)
				if a.dedupOld[i] != nil {
					cond = hbaserpc.IfEquals(famQueue, qualDedup, a.dedupOld[i])
				}
				acts[k] = hbaserpc.Action{Cond: &cond, Mutation: &hbaserpc.Put{Row: dedupRow(a.name, a.events[i].ID), TTL: a.window,
					Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualDedup, Value: mine}}}}
			}
			res, err := a.db.MultiMutate(ctx, a.table, acts)
			if res == nil {
				return wrap(err, a.op)
			}
			for k, r := range res {
				switch {
				case r.Err == nil && r.Applied:
					a.claimed[send[k]] = true
					a.dedupOld[send[k]] = nil
				case r.Err == nil || inDoubt(r.Err):
					check = append(check, send[k])
				default:
					return wrap(r.Err, a.op)
				}
			}
			send = nil
		}
		if len(check) == 0 {
			break
		}
		vals, ts, err := a.readDedup(ctx, check)
		if err != nil {
			return err
		}
		for k, i := range check {
			a.waiting[i] = false
			v := vals[k]
			if v == nil {
				a.dedupOld[i] = nil // not applied (in doubt), or expired: claim again
				send = append(send, i)
				continue
			}
			if bytes.Equal(v, mine) {
				a.claimed[i] = true // our claim, whose reply was lost
				a.dedupOld[i] = nil
				continue
			}
			_, _, tok, pending, err := decodeDedup(v)
			if err != nil {
				return driver.Errorf(dcsync.Internal, a.op, "event id %q: %v", a.events[i].ID, err)
			}
			if pending {
				if !bytes.Equal(a.waitVal[i], v) {
					a.waitVal[i], a.waitSince[i] = v, time.Now()
				}
				// Its age by the server's clock, or our own wait: clock skew only
				// changes when a stale claim is taken over.
				age := time.Since(time.UnixMilli(ts[k]))
				if time.Since(a.waitSince[i]) >= claimTimeout || age >= claimTimeout {
					a.s.log.Debug("hbase: taking over a stale dedup claim", "queue", a.name, "id", a.events[i].ID)
					a.dedupOld[i] = v
					send = append(send, i)
				} else {
					a.waiting[i] = true
				}
				continue
			}
			if tok == a.token {
				// At a seq of ours, from an earlier round (then aborted): take it back.
				a.dedupOld[i] = v
				send = append(send, i)
				continue
			}
			out, err := a.resolve(ctx, i, v)
			if err != nil {
				return err
			}
			if out == outTakeover {
				a.dedupOld[i] = v
				send = append(send, i)
			}
		}
		check = nil
	}
	return nil
}

// place points the claimed ids of the events in idx at their reserved seqs (a
// check-and-set from the pending claim) and returns the events to write. An event
// whose claim was taken over meanwhile (this call stalled past claimTimeout) gives up
// its seq (tombstoned by write) and is settled against the new owner next round.
func (a *appender) place(ctx context.Context, idx []int) ([]int, error) {
	var ready, ids []int
	for _, i := range idx {
		if a.events[i].ID == "" {
			ready = append(ready, i)
		} else {
			ids = append(ids, i)
		}
	}
	mine := encodePending(a.token)
	cond := hbaserpc.IfEquals(famQueue, qualDedup, mine)
	for try := 0; len(ids) > 0; try++ {
		if try > maxTries {
			return nil, driver.Errorf(dcsync.Connection, a.op, "%d dedup rows written with unknown outcome %d times", len(ids), try)
		}
		acts := make([]hbaserpc.Action, len(ids))
		vals := make([][]byte, len(ids))
		for k, i := range ids {
			vals[k] = encodeDedup(a.events[i].Partition, a.seq[i], a.token)
			acts[k] = hbaserpc.Action{Cond: &cond, Mutation: &hbaserpc.Put{Row: dedupRow(a.name, a.events[i].ID), TTL: a.window,
				Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualDedup, Value: vals[k]}}}}
		}
		res, err := a.db.MultiMutate(ctx, a.table, acts)
		if res == nil {
			return nil, wrap(err, a.op)
		}
		var check []int
		var checkVals [][]byte
		for k, r := range res {
			switch {
			case r.Err == nil && r.Applied:
				ready = append(ready, ids[k])
			case r.Err == nil || inDoubt(r.Err):
				check = append(check, ids[k])
				checkVals = append(checkVals, vals[k])
			default:
				return nil, wrap(r.Err, a.op)
			}
		}
		ids = nil
		if len(check) == 0 {
			break
		}
		got, _, err := a.readDedup(ctx, check)
		if err != nil {
			return nil, err
		}
		for k, i := range check {
			switch {
			case bytes.Equal(got[k], checkVals[k]):
				ready = append(ready, i) // ours, whose reply was lost
			case bytes.Equal(got[k], mine):
				ids = append(ids, i) // in doubt, not applied: again
			default:
				// Taken over: our seq goes unused; settle the id next round.
				a.unused = append(a.unused, slot{a.events[i].Partition, a.seq[i]})
				a.claimed[i] = false
				a.dedupOld[i] = nil
			}
		}
	}
	return ready, nil
}

// write stores the placed events at their seqs and tombstones the unused seqs, with
// plain Puts, then makes sure that no event's seq was aborted before its Put: a
// tombstone there (AbortQueueSeq writes q:a only while q:e is absent, atomically on
// the row) means nobody reads the event at that seq, and it is left pending for the
// next round (its id, still ours, taken back from that seq); every other event is
// stored, for good. Puts whose outcome is unknown are sent again (idempotent).
//
// Small batches (fewer than scanMinEvents events, or fewer than scanPerPartition a
// partition) read each row's q:a back in the Puts' request (Action.Read: one
// MultiMutate, one server-side Get per event). Larger ones write each partition's
// events in a MultiMutate of their own, all partitions concurrently, and as soon as
// a partition's Puts have returned, Scan its q:a over the batch's seqs there
// (contiguous: one Increment reserved them): an abort that came before a Put has
// written its tombstone by then, and one after it was refused. For 500 1 KB events
// over 16 partitions this took 0.6x the time of the read-backs, whose 500 Gets cost
// the server more than 16 small scans overlapping the other partitions' writes.
func (a *appender) write(ctx context.Context, idx []int) error {
	unused := a.unused
	a.unused = nil
	byPart := map[int][]int{}
	var parts []int
	for _, i := range idx {
		p := a.events[i].Partition
		if byPart[p] == nil {
			parts = append(parts, p)
		}
		byPart[p] = append(byPart[p], i)
	}
	readBack := len(idx) < scanMinEvents || len(idx) < scanPerPartition*len(parts)
	switch appendVerify.Load() {
	case verifyReadBack:
		readBack = true
	case verifyScan:
		readBack = false
	}
	groups := [][]int{idx}
	if !readBack {
		groups = groups[:0]
		for _, p := range parts {
			groups = append(groups, byPart[p])
		}
	}
	if len(groups) == 0 {
		groups = append(groups, nil) // the unused seqs' tombstones alone
	}
	out := make([]writeResult, len(groups))
	if len(groups) == 1 {
		out[0] = a.writeGroup(ctx, groups[0], unused, readBack)
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, maxWriteGroups)
		for k, g := range groups {
			var u []slot
			if k == 0 {
				u = unused
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				out[k] = a.writeGroup(ctx, g, u, readBack)
			}()
		}
		wg.Wait()
	}
	for _, r := range out {
		if r.err != nil {
			return r.err
		}
	}
	for _, r := range out {
		for _, i := range r.written {
			if !r.aborted[i] {
				a.finish(i)
				continue
			}
			a.s.log.Debug("hbase: queue seq aborted before its write; appending again", "queue", a.name, "partition", a.events[i].Partition, "seq", a.seq[i])
			if a.events[i].ID != "" {
				a.claimed[i] = false
				a.dedupOld[i] = encodeDedup(a.events[i].Partition, a.seq[i], a.token)
			}
		}
	}
	return nil
}

// Verifying writes by scans (see write).
const (
	scanMinEvents    = 64 // fewer events in a round: read back
	scanPerPartition = 16 // fewer events per partition on average: read back
	maxWriteGroups   = 16 // partitions written and scanned at once
)

// writeResult is what writeGroup did: the events it wrote, and those of them whose
// seq had been aborted before their write.
type writeResult struct {
	written []int
	aborted map[int]bool
	err     error
}

// writeGroup writes the events in idx (and tombstones the unused seqs), sending again
// the Puts whose outcome is unknown, and finds which were aborted before their write:
// read back in the same request (readBack), or by a scan of their partition after
// (then idx holds the events of one partition).
func (a *appender) writeGroup(ctx context.Context, idx []int, unused []slot, readBack bool) writeResult {
	cond := hbaserpc.IfAbsent(famQueue, qualEntry)
	res := writeResult{written: make([]int, 0, len(idx)), aborted: map[int]bool{}}
	var read []hbaserpc.Column
	if readBack {
		read = abortCols
	}
	var last error
	for try := 0; len(idx) > 0 || len(unused) > 0; try++ {
		if try > maxTries {
			res.err = driver.Errorf(dcsync.Connection, a.op, "%d entries written with unknown outcome %d times: %w", len(idx), try, last)
			return res
		}
		acts := make([]hbaserpc.Action, 0, len(idx)+len(unused))
		for _, i := range idx {
			put := a.entryPut(i)
			put.Row = entryRow(partPrefix(a.name, a.events[i].Partition), a.seq[i])
			acts = append(acts, hbaserpc.Action{Mutation: put, Read: read})
		}
		// Tombstones of unused seqs are best effort: a consumer aborts a hole anyway.
		for _, u := range unused {
			acts = append(acts, hbaserpc.Action{Cond: &cond, Mutation: abortPut(entryRow(partPrefix(a.name, u.p), u.seq))})
		}
		unused = nil
		rs, err := a.db.MultiMutate(ctx, a.table, acts)
		if rs == nil {
			res.err = wrap(err, a.op)
			return res
		}
		var again []int
		for k, i := range idx {
			r := rs[k]
			switch {
			case r.Err == nil:
				res.written = append(res.written, i)
				if readBack && aborted(r.Read) {
					res.aborted[i] = true
				}
			case inDoubt(r.Err):
				again = append(again, i)
				last = r.Err
			default:
				res.err = wrap(r.Err, a.op)
				return res
			}
		}
		idx = again
	}
	if readBack || len(res.written) == 0 {
		return res
	}
	p := a.events[res.written[0]].Partition
	lo, hi := a.seq[res.written[0]], a.seq[res.written[0]]
	for _, i := range res.written {
		lo, hi = min(lo, a.seq[i]), max(hi, a.seq[i])
	}
	tomb, err := a.scanTombstones(ctx, p, lo, hi)
	if err != nil {
		res.err = err
		return res
	}
	for _, i := range res.written {
		if tomb[a.seq[i]] {
			res.aborted[i] = true
		}
	}
	return res
}

// scanTombstones returns the seqs in [lo, hi] of partition p that hold a tombstone:
// one Scan of q:a (rows without it are not returned), run again when it fails with
// anything but an Internal error, up to maxTries times (a read: idempotent).
func (a *appender) scanTombstones(ctx context.Context, p int, lo, hi uint64) (map[uint64]bool, error) {
	prefix := partPrefix(a.name, p)
	start, stop := entryRow(prefix, lo), entryRow(prefix, hi+1)
	var tomb map[uint64]bool
	var err error
	for try := 0; try < maxTries; try++ {
		tomb = map[uint64]bool{}
		err = a.db.ScanFunc(ctx, a.table, hbaserpc.Scan{StartRow: start, StopRow: stop, Columns: abortCols,
			Caching: int(min(hi-lo+1, 1000))}, func(r hbaserpc.Row) error {
			if len(r.Key) != len(start) || !bytes.HasPrefix(r.Key, prefix) {
				return driver.Errorf(dcsync.Internal, a.op, "partition %d: scanned row %q is not an entry", p, r.Key)
			}
			if aborted(r.Cells) {
				tomb[binary.BigEndian.Uint64(r.Key[len(r.Key)-8:])] = true
			}
			return nil
		})
		if err == nil || ctx.Err() != nil || dcsync.CodeOf(err) == dcsync.Internal {
			break
		}
	}
	if err != nil {
		return nil, wrap(err, a.op)
	}
	return tomb, nil
}

func (a *appender) finish(i int) {
	a.res[i] = driver.QueueAppend{Partition: a.events[i].Partition, Seq: a.seq[i]}
	a.done[i] = true
}
