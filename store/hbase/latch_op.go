package hbase

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// Op markers: a latch update applied once, whichever region server its attempts reach.
//
// An update's Increment carries a nonce that every resend reuses, but a region server
// knows the nonces of a region only from the writes it applied itself, or replayed from
// the WAL after a crash: after a clean move (balancer, a region server stopped in
// order) the new server does not know them, and a resend of an Increment that the old
// server applied (its reply lost) is applied again. So every attempt of one AddLatch
// also puts a cell of its own, the op marker
//
//	C:dcsync_op:<32 hex digits, random per AddLatch>   an 8-byte zero
//
// and is conditional on that cell being absent, beside the latch's lifetime marker (or
// count cell) it was conditional on before: hbaserpc.IfAll, one FilterList condition
// read with the row at the region server. The first attempt to be applied writes the
// marker; every later one (a resend, or the first attempt itself landing late) is
// refused by whichever server holds the region then. The store does not resend an
// update it does not know the outcome of blindly: it reads the row, and its marker there
// means applied (the count read is a state after it); no marker means not applied
// (yet), and the same update, with the same marker, is planned again from that read.
//
// The marker is an 8-byte zero, like every dcsync cell of family C: a Java DC read
// reads its farm's count cell only (HBaseLatchStorage.java:117-119) and a Java XDC read
// adds up Bytes.toLong of every cell of the family (HBaseLatchStorage.java:128-134), so
// neither sees a difference. dcsync's reads ignore op markers when telling whether a
// latch exists.
//
// Its life: a marker is needed while any attempt of its update may still reach a
// region server. The store sends no attempt later than opResendWindow after the first
// (it reports the outcome unknown instead), and HBase drops a call that waited at the
// server past its timeout (Config.RPCTimeout, sent with each call), so the marker's
// TTL, opMarkerTTL (or the latch's end, when sooner: after it the lifetime condition
// refuses every attempt), outlasts every attempt by minutes. An update none of whose
// attempts was in doubt (each got a reply) has nothing left in flight once it returns:
// its marker is settled, and the store's next update of the same cell deletes it in the
// same mutation (at most maxSettledOps per cell; more are left to their TTL). So a cell
// updated again and again by one store carries about one marker per update in flight,
// and a one-off updater's marker lives opMarkerTTL.

const (
	// opMarkerPrefix starts the qualifier of an op marker. It never starts with
	// "count_" (no Java DC read meets one) nor with markerPrefix.
	opMarkerPrefix = "dcsync_op:"
	// opMarkerTTL is an op marker's TTL, when the latch does not end before.
	opMarkerTTL = 10 * time.Minute
	// opResendWindow is how long after an update's first attempt the store may still
	// send another; after it, an update whose outcome is unknown reports so.
	opResendWindow = 2 * time.Minute
	// maxSettledOps bounds the settled markers a store keeps to delete, per cell.
	maxSettledOps = 16
)

// latchOp is one AddLatch: its op marker and what its attempts did.
type latchOp struct {
	qual    []byte    // the op marker's qualifier
	first   time.Time // when its first attempt was sent (zero: none was)
	doubted bool      // an attempt's outcome was unknown: it may still land
	settled [][]byte  // settled markers of earlier updates this attempt deletes
}

func newLatchOp() *latchOp {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return &latchOp{qual: []byte(opMarkerPrefix + hex.EncodeToString(b[:]))}
}

// isOpMarker reports whether q is an op marker's qualifier.
func isOpMarker(q []byte) bool { return bytes.HasPrefix(q, []byte(opMarkerPrefix)) }

// guard returns the write of one attempt of op: base (the update's own condition)
// and "op's marker absent"; muts, then the Put of the marker and the deletes of the
// settled markers taken for this attempt. The marker's TTL is opMarkerTTL, cut to end
// with the latch when endsMs (the latch's end, 0 when unknown) is sooner: lower is a
// lower bound of the version HBase stamps the Put with.
func (op *latchOp) guard(base hbaserpc.Condition, muts []hbaserpc.Mutation, endsMs, lower int64) (hbaserpc.Condition, []hbaserpc.Mutation) {
	ttl := opMarkerTTL
	if endsMs > 0 {
		ttl = min(ttl, max(time.Duration(endsMs-lower)*time.Millisecond, time.Millisecond))
	}
	out := append(muts[:len(muts):len(muts)], &hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLatch, Qualifier: op.qual, Value: zero8}}, TTL: ttl})
	if len(op.settled) > 0 {
		cols := make([]hbaserpc.Column, len(op.settled))
		for i, q := range op.settled {
			cols[i] = hbaserpc.Column{Family: famLatch, Qualifier: q}
		}
		// Stamped with the server's time: later than each settled marker's version
		// (each was written, and answered, before), so each is hidden for good.
		out = append(out, &hbaserpc.Delete{Columns: cols})
	}
	return hbaserpc.IfAll(base, hbaserpc.IfAbsent(famLatch, op.qual)), out
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

// hasCell reports whether the row holds a cell of qualifier q.
func (r latchView) hasCell(q []byte) bool {
	for _, c := range r.cells {
		if bytes.Equal(c.Qualifier, q) {
			return true
		}
	}
	return false
}

// latchCells returns the cells of cells that are not op markers: the latch's own.
func latchCells(cells []hbaserpc.Cell) []hbaserpc.Cell {
	out := cells[:0:0]
	for _, c := range cells {
		if !isOpMarker(c.Qualifier) {
			out = append(out, c)
		}
	}
	return out
}

// settledOps are the settled op markers of the cells a store updated, to delete with
// its next update of each (see above). Guarded by knownLatches.mu.
type settledOps struct {
	quals [][]byte
	at    time.Time // when the newest was added
}

// takeSettled returns the settled markers of cell (row, qual) and forgets them: the
// caller deletes them with its write, and gives them back (giveSettled) when that
// write was not applied.
func (kl *knownLatches) takeSettled(row, qual []byte) [][]byte {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	k := string(row) + "\x00" + string(qual)
	s := kl.settled[k]
	delete(kl.settled, k)
	return s.quals
}

// giveSettled adds quals to the settled markers of cell (row, qual), up to
// maxSettledOps (more are left to their TTL).
func (kl *knownLatches) giveSettled(row, qual []byte, quals ...[]byte) {
	if len(quals) == 0 {
		return
	}
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if kl.settled == nil {
		kl.settled = map[string]settledOps{}
	}
	k := string(row) + "\x00" + string(qual)
	s, ok := kl.settled[k]
	if !ok && len(kl.settled) >= maxKnownLatches {
		// Full: drop the cells whose markers have all expired.
		for key, e := range kl.settled {
			if time.Since(e.at) > opMarkerTTL {
				delete(kl.settled, key)
			}
		}
		if len(kl.settled) >= maxKnownLatches {
			return
		}
	}
	for _, q := range quals {
		if len(s.quals) < maxSettledOps {
			s.quals = append(s.quals, q)
		}
	}
	s.at = time.Now()
	kl.settled[k] = s
}
