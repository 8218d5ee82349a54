package hbase

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// A DC count-down in one call.
//
// AddLatch's full path reads the latch row and the server's clock (one call) to plan
// its write (latchView.timed): the condition (the cell's lifetime marker), the TTL
// that ends the new version at the latch's end (the marker's end minus a lower bound of
// the version HBase will stamp), and the delete of the version it replaces. For a DC
// latch whose cell dcsync created (it has a marker), a store that has just updated the
// cell knows all of that: the marker and its end do not change, the version it wrote
// came back with the Increment's result, and the clock probe of the read is an anchor
// of the server's time: HBase stamped the probe with its time S before the reply
// arrived at client time R, so at a later client time t the server's time is at least
// S + (t - R), less driftMargin of t - R for clock rates that differ. So the next
// update of that cell by the same store sends the write at once:
//
//	check-and-mutate "marker present": Increment(delta, TTL = end - lower),
//	Delete(cell versions <= the version remembered)
//
// with lower = max(the anchor's bound, the version remembered + 1) (HBase stamps an
// updated counter max(server time, previous version + 1)). Not applied (the marker is
// gone: the latch ended, or was deleted and created again) changes nothing, and the
// full path runs. Applied, the write is checked against what was remembered: when the
// Increment's result is not the value remembered plus delta, or its version is later
// than lower by more than the call's and the anchor's latencies explain (another
// client updated the cell since: its versions may have escaped the delete, and the
// version is later than the bound the TTL assumed, so the cell would end late), a
// second write replaces that version at once: check-and-mutate "marker present":
// Increment(0, TTL = end - max(bound, version + 1)), Delete(versions <= version).
// So the cell ends at the latch's end (later by at most the update's latency) and no
// older version outlives it, as on the full path; one call when this store is the
// cell's only writer.
//
// Only DC keys of rows no other latch can share (not layout.AmbiguousHBaseLatchRow)
// take this path: the full path's row read is what checks those for collisions. An
// anchor older than maxAnchorAge is not used: the full path reads a fresh one.

// maxAnchorAge is how long a clock anchor serves.
const maxAnchorAge = 10 * time.Second

// maxKnownLatches bounds the latch cells a store remembers.
const maxKnownLatches = 1 << 16

// knownLatch is what a store remembers of a DC latch cell it updated.
type knownLatch struct {
	marker    []byte // the qualifier of the cell's lifetime marker
	endsMs    int64  // the latch's end, epoch ms
	ts        int64  // the version this store last wrote
	val       int64  // the count it wrote
	anchorS   int64  // a server time (a clock probe), epoch ms
	anchorR   time.Time
	anchorRTT time.Duration // the probe's call latency
}

// lower returns a lower bound of the server's time at client time t.
func (l knownLatch) lower(t time.Time) int64 {
	d := max(t.Sub(l.anchorR), 0)
	return l.anchorS + (d - d/driftMargin).Milliseconds()
}

type knownLatches struct {
	mu        sync.Mutex
	m         map[string]knownLatch
	lanes     map[string][]*opLane // free op lanes per cell (latch_op.go)
	storeID   string               // names this store's lanes
	lanesMade uint64
}

func (kl *knownLatches) get(row, qual []byte) (knownLatch, bool) {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	l, ok := kl.m[string(row)+"\x00"+string(qual)]
	return l, ok
}

func (kl *knownLatches) put(row, qual []byte, l knownLatch) {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if kl.m == nil {
		kl.m = map[string]knownLatch{}
	}
	k := string(row) + "\x00" + string(qual)
	if _, ok := kl.m[k]; !ok && len(kl.m) >= maxKnownLatches {
		// Full: drop the latches that have ended.
		now := time.Now().UnixMilli()
		for key, e := range kl.m {
			if e.endsMs <= now {
				delete(kl.m, key)
			}
		}
	}
	if _, ok := kl.m[k]; ok || len(kl.m) < maxKnownLatches {
		kl.m[k] = l
	}
}

func (kl *knownLatches) forget(row, qual []byte) {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	delete(kl.m, string(row)+"\x00"+string(qual))
}

// cellOf returns the cell of qualifier q in cells.
func cellOf(cells []hbaserpc.Cell, q []byte) (hbaserpc.Cell, bool) {
	for _, c := range cells {
		if bytes.Equal(c.Qualifier, q) {
			return c, true
		}
	}
	return hbaserpc.Cell{}, false
}

// timedWrite is the one-call update of a marked cell (see above): Increment by delta
// with the TTL that ends the new version at endsMs given lower, and the delete of the
// versions up to prev.
func timedWrite(q []byte, delta int64, endsMs, lower, prev int64) []hbaserpc.Mutation {
	return []hbaserpc.Mutation{
		&hbaserpc.Increment{Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: q, Amount: delta}}, TTL: time.Duration(endsMs-lower) * time.Millisecond},
		&hbaserpc.Delete{Columns: []hbaserpc.Column{{Family: famLatch, Qualifier: q}}, Timestamp: prev},
	}
}

// addKnown is AddLatch of delta on a DC cell this store remembers as l (see above), the
// first attempt of the update o (its op lane rides in the same write, latch_op.go).
// ok false: not applied, or in doubt (o.doubted), and the full path is to run (its read
// tells which). err: the write failed without being applied.
func (s *Store) addKnown(ctx context.Context, op string, o *latchOp, row, q []byte, l knownLatch, delta int64) (own int64, ok bool, err error) {
	sent := time.Now()
	lower := max(l.lower(sent), l.ts+1)
	if l.endsMs-lower < 1 {
		s.latchMem.forget(row, q)
		return 0, false, nil
	}
	cond := hbaserpc.IfEquals(famLatch, l.marker, zero8)
	gcond, muts := o.guard(cond, timedWrite(q, delta, l.endsMs, lower, l.ts), l.endsMs, lower)
	o.sending()
	applied, res, err := s.db.CheckAndMutate(ctx, s.latchTable, row, gcond, muts...)
	if err != nil || !applied {
		s.latchMem.forget(row, q)
		if err != nil && inDoubt(err) {
			o.doubted = true
			s.log.Debug("hbase: latch update in doubt; reading the row for its op lane", "row", row, "err", err)
			return 0, false, nil
		}
		return 0, false, err
	}
	c, found := cellOf(res, q)
	if !found {
		s.latchMem.forget(row, q)
		return 0, true, driver.Errorf(dcsync.Internal, op, "Increment of %q returned no value", q)
	}
	if own, err = decode64(op, c); err != nil {
		s.latchMem.forget(row, q)
		return 0, true, err
	}
	took := time.Since(sent)
	if c.Timestamp < lower {
		// Stamped before the bound: the serving region server's clock is behind the
		// anchor's (the region moved to another server, say), so the TTL sent ends this
		// version before the latch does. Replace it at once with a version whose TTL
		// counts from just above this stamp (HBase stamps the next version at least
		// one above it: never early, late by at most the time until that write), and
		// forget the anchor: the next update reads a fresh one on the full path.
		s.log.Debug("hbase: latch cell stamped below the clock anchor's bound; replacing the version", "row", row, "stamp", c.Timestamp, "bound", lower)
		s.latchMem.forget(row, q)
		if l.endsMs-(c.Timestamp+1) < 1 {
			return own, true, nil
		}
		_, _, err := s.db.CheckAndMutate(ctx, s.latchTable, row, cond, timedWrite(q, 0, l.endsMs, c.Timestamp+1, c.Timestamp)...)
		if err != nil {
			// The update itself is applied (exactly once): report it as such (an error
			// would invite a second count-down); only its version's end is early.
			s.log.Warn("hbase: a latch count-down was applied, but re-stamping its cell's end failed: the latch may end before its TTL", "row", row, "err", err)
		}
		return own, true, nil
	}
	explained := took + l.anchorRTT + time.Millisecond + sent.Sub(l.anchorR)/driftMargin*2
	if own != l.val+delta || time.Duration(c.Timestamp-lower)*time.Millisecond > explained {
		// Another client updated the cell since this store did: replace the version
		// just written by one that ends at the latch's end, deleting every older one.
		s.log.Debug("hbase: latch cell updated by another client since; replacing the version", "row", row, "want", l.val+delta, "got", own, "late", c.Timestamp-lower)
		now := time.Now()
		lower2 := max(l.lower(now), c.Timestamp+1)
		if l.endsMs-lower2 < 1 {
			s.latchMem.forget(row, q)
			return own, true, nil // the latch has ended: the version ends with it
		}
		fixed, res2, err := s.db.CheckAndMutate(ctx, s.latchTable, row, cond, timedWrite(q, 0, l.endsMs, lower2, c.Timestamp)...)
		c2, found := cellOf(res2, q)
		if err != nil || !fixed || !found {
			s.latchMem.forget(row, q)
			if err != nil {
				s.log.Debug("hbase: replacing a latch version failed", "row", row, "err", err)
			}
			return own, true, nil
		}
		c = c2
		if own, err = decode64(op, c); err != nil {
			s.latchMem.forget(row, q)
			return 0, true, err
		}
	}
	l.ts, l.val = c.Timestamp, own
	s.latchMem.put(row, q, l)
	return own, true, nil
}
