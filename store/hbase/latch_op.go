package hbase

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// Op lanes: a latch update applied once, whichever region server its attempts reach.
//
// An update's Increment carries a nonce that every resend reuses, but a region server
// knows the nonces of a region only from the writes it applied itself, or replayed from
// the WAL after a crash: after a clean move (balancer, a region server stopped in
// order) the new server does not know them, and a resend of an Increment that the old
// server applied (its reply lost) is applied again. So every update is also a
// compare-and-set on a cell of the store's own, an op lane:
//
//	C:dcsync_op:<store id>:<n>   8 zero bytes, then the 16 random bytes of the update
//	                             that wrote it last
//
// Each attempt of an update is conditional on its lane still holding what the lane held
// before the update (absent, for a new lane), beside the latch's lifetime marker (or
// count cell) it was conditional on before (hbaserpc.IfAll: one FilterList condition
// checked with the row at the region server, in the same single call), and writes the
// update's own value into the lane. The first attempt applied moves the lane on; every
// later one (a resend, or the first attempt itself landing late, after later updates
// too) finds another value and is refused by whichever server holds the region then.
// A lane is used by one update at a time and written by its store alone, so the store
// knows what it holds. The store never resends an update of unknown outcome blindly:
// it reads the row, and its value in the lane means applied (the count read is a state
// after it); the value before means not applied (yet), and the same update is planned
// again from that read, with the same lane and value.
//
// A lane's value reads as 0 to a Java reader: a Java DC read reads its farm's count
// cell only (HBaseLatchStorage.java:117-119) and a Java XDC read adds up Bytes.toLong
// of every cell of the family (HBaseLatchStorage.java:128-134), which reads the first
// 8 bytes of a longer value. dcsync's reads skip lanes.
//
// A lane lives as long as the latch: its TTL ends with the latch's lifetime marker
// (after that the marker condition refuses every attempt anyway), at most the update's
// own latency later, as the count cell version the same call writes. A lane that does
// not hold what the store left there (it expired, or a delete of the latch took it) is
// given up, and the update goes on in a new lane: the attempts sent through the old one
// cannot be applied any more (they need the value the lane has lost, which is unique).
// An update whose outcome stays unknown gives its lane up too. A store keeps up to
// maxLanesPerCell free lanes per cell, so a cell holds about one lane per store that
// updates it (more while one store updates it concurrently), whatever the number of
// updates.
//
// No lane on a cell without a lifetime marker (a latch a Java client created, whose end
// dcsync cannot know: its cells carry their TTL forward from each update): a lane there
// would have to outlive the latch's cells (a lane that ended first would let a late
// attempt through), and the row would then outlive the latch, so that a Java XDC read,
// which sums every cell of the row, would read the expired latch as 0 instead of
// missing. Such an update is sent once, conditional on the count cell it updates (its
// condition reads the column it increments, so the client never resends it either,
// hbaserpc.Client.CheckAndMutate): applied at most once, and when its outcome is
// unknown (the reply lost) AddLatch reports Connection, outcome unknown, instead of
// resending (TestLatchJavaCellInDoubt).

const (
	// opLanePrefix starts the qualifier of an op lane. It never starts with "count_"
	// (no Java DC read meets one) nor with markerPrefix.
	opLanePrefix = "dcsync_op:"
	// opResendWindow is how long after an update's first attempt the store may still
	// send another; after it, an update whose outcome is unknown reports so.
	opResendWindow = 2 * time.Minute
	// maxLanesPerCell bounds the free lanes a store keeps per cell.
	maxLanesPerCell = 16
)

// opLane is one op lane of a cell and what the store last left in it.
type opLane struct {
	qual []byte
	prev []byte // nil: absent
}

// latchOp is one AddLatch (or the take-back of one): its lane and value, and what its
// attempts did.
type latchOp struct {
	row, q  []byte // the cell updated
	val     []byte // zero8 + 16 random bytes: what it writes into its lane
	lane    *opLane
	first   time.Time // when its first attempt was sent (zero: none was)
	doubted bool      // an attempt's outcome was unknown: it may still land
	laned   bool      // the last attempt planned (guard) writes the lane
}

// newLatchOp starts an update of cell (row, q), in a free lane of the store's.
func (s *Store) newLatchOp(row, q []byte) *latchOp {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return &latchOp{row: row, q: q, val: append(append([]byte(nil), zero8...), b[:]...), lane: s.latchMem.takeLane(row, q)}
}

// isOpLane reports whether q is an op lane's qualifier.
func isOpLane(q []byte) bool { return bytes.HasPrefix(q, []byte(opLanePrefix)) }

// guard returns the write of one attempt of op: base (the update's own condition) and
// "op's lane holds what it held before"; muts, then the Put of op's value into the
// lane, whose TTL ends with the latch at endsMs, lower being a lower bound of the
// version HBase stamps the Put with. When the latch's end is unknown (endsMs 0: a cell
// without a lifetime marker) the attempt goes without the lane: base and muts as they
// are (see "No lane" above); base must then read a column muts change, so that the
// client does not resend it when its outcome is unknown.
func (op *latchOp) guard(base hbaserpc.Condition, muts []hbaserpc.Mutation, endsMs, lower int64) (hbaserpc.Condition, []hbaserpc.Mutation) {
	op.laned = endsMs > 0
	if !op.laned {
		return base, muts
	}
	ttl := max(time.Duration(endsMs-lower)*time.Millisecond, time.Millisecond)
	out := append(muts[:len(muts):len(muts)], &hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLatch, Qualifier: op.lane.qual, Value: op.val}}, TTL: ttl})
	lane := hbaserpc.IfAbsent(famLatch, op.lane.qual)
	if op.lane.prev != nil {
		lane = hbaserpc.IfEquals(famLatch, op.lane.qual, op.lane.prev)
	}
	return hbaserpc.IfAll(base, lane), out
}

// sending records that an attempt of op is about to be sent.
func (op *latchOp) sending() {
	if op.first.IsZero() {
		op.first = time.Now()
	}
}

// tooLate reports whether op may send no further attempt: one was in doubt and the
// first was sent longer than opResendWindow ago.
func (op *latchOp) tooLate() bool {
	return op.doubted && time.Since(op.first) > opResendWindow
}

// appliedIn reports whether an attempt of op was applied, by the row r read after it:
// its lane holds its value.
func (op *latchOp) appliedIn(r latchView) bool {
	v, ok := r.value(op.lane.qual)
	return ok && bytes.Equal(v, op.val)
}

// recheck is called with the row r read after an attempt of op was not applied or was
// in doubt, and found not applied: when op's lane does not hold what the store left
// there (it expired, or a delete of the latch took it), op moves to a new lane.
func (s *Store) recheck(op *latchOp, r latchView) {
	v, ok := r.value(op.lane.qual)
	if ok == (op.lane.prev != nil) && (!ok || bytes.Equal(v, op.lane.prev)) {
		return
	}
	s.log.Debug("hbase: latch op lane lost; moving to a new one", "row", op.row, "lane", string(op.lane.qual))
	op.lane = s.latchMem.newLane()
}

// end gives op's lane back to the store, moved on to op's value when applied through
// it; a lane of an update whose outcome is unknown is given up.
func (s *Store) end(op *latchOp, applied bool) {
	switch {
	case applied && op.laned:
		op.lane.prev = op.val
	case applied:
		// Applied without the lane (a cell without a lifetime marker): the lane holds
		// what it held.
	case op.doubted:
		return
	}
	s.latchMem.giveLane(op.row, op.q, op.lane)
}

// value returns the value of the row's cell of qualifier q.
func (r latchView) value(q []byte) ([]byte, bool) {
	for _, c := range r.cells {
		if bytes.Equal(c.Qualifier, q) {
			return c.Value, true
		}
	}
	return nil, false
}

// latchCells returns the cells of cells that are not op lanes: the latch's own.
func latchCells(cells []hbaserpc.Cell) []hbaserpc.Cell {
	out := cells[:0:0]
	for _, c := range cells {
		if !isOpLane(c.Qualifier) {
			out = append(out, c)
		}
	}
	return out
}

// newLane returns a lane never used.
func (kl *knownLatches) newLane() *opLane {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if kl.storeID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		kl.storeID = hex.EncodeToString(b[:])
	}
	kl.lanesMade++
	return &opLane{qual: []byte(opLanePrefix + kl.storeID + ":" + strconv.FormatUint(kl.lanesMade, 10))}
}

// takeLane returns a free lane of cell (row, qual), or a new one.
func (kl *knownLatches) takeLane(row, qual []byte) *opLane {
	kl.mu.Lock()
	k := string(row) + "\x00" + string(qual)
	if free := kl.lanes[k]; len(free) > 0 {
		l := free[len(free)-1]
		if len(free) == 1 {
			delete(kl.lanes, k)
		} else {
			kl.lanes[k] = free[:len(free)-1]
		}
		kl.mu.Unlock()
		return l
	}
	kl.mu.Unlock()
	return kl.newLane()
}

// giveLane makes l a free lane of cell (row, qual) again, up to maxLanesPerCell per
// cell and maxKnownLatches cells (beyond, it is dropped: its cell ends with its TTL).
func (kl *knownLatches) giveLane(row, qual []byte, l *opLane) {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if kl.lanes == nil {
		kl.lanes = map[string][]*opLane{}
	}
	k := string(row) + "\x00" + string(qual)
	free, ok := kl.lanes[k]
	if !ok && len(kl.lanes) >= maxKnownLatches || len(free) >= maxLanesPerCell {
		return
	}
	kl.lanes[k] = append(free, l)
}
