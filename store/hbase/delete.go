package hbase

import (
	"bytes"
	"context"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

var _ driver.LatchDeleter = (*Store)(nil)

// DeleteLatch waits for the server's clock to pass the versions it deletes (see
// DeleteLatch) at most maxClockWaits times, and only when they are less than
// maxClockWaitMs ahead of it (a version stamped further in the future by a client's
// clock is deleted without waiting).
const (
	maxClockWaits  = 20
	maxClockWaitMs = 1000
)

// DeleteLatch implements driver.LatchDeleter. At level DC it deletes k.Farm's count
// cell C:count_<farm> and that cell's lifetime markers; at level XDC every count cell
// and marker of the latch row. When the delete leaves no count cell in the row, it
// deletes every cell read (the markers and C:dcsync_xdc too), so that a create right
// after it finds the row empty. The Java library has no delete (HBaseLatchStorage.java
// has only create, update and read); a Java reader of a deleted farm sees no cell, as
// it does for a latch never created.
//
// In one call to the region server it reads the latch row and the server's clock
// (hbaserpc.GetWithClock). It returns NotFound, deleting nothing, when the latch is not
// alive by that clock: no count cell (DC: k.Farm's; XDC: any), or only cells whose
// marker's end has passed. It returns InvalidArgument, deleting nothing, when the row
// holds a marker of another (client, name) (layout.AmbiguousHBaseLatchRow); a row only
// a Java client wrote has no marker and cannot be checked.
//
// The delete is one conditional RowMutations of column deletes each stamped at the
// timestamp of the version read, never at server time, so that a create after the
// delete writes a version the delete does not hide, and a delete whose reply is lost
// can be judged by reading again. A delete marker hides every version at or before its
// timestamp, a later Put of that same millisecond too: DeleteLatch therefore first
// waits (re-reading, a millisecond or so) until the server's clock, as probed by the
// read, is past the newest version it deletes. The delete is then applied, and every
// create after it is stamped, later than every marker (on a server whose clock does
// not go back). The delete is conditional on every count cell and marker it deletes
// still holding the value read. So:
//
//   - An update (AddLatch) that lands between the read and the delete changes a count
//     cell: the delete is not applied, and DeleteLatch reads again and starts over
//     (at most maxTries rounds); the update's effect is then deleted with the latch.
//   - An update that lands after the delete finds the marker gone and is refused
//     (NotFound), and cannot re-create the cell holding only its delta.
//   - A create after the delete makes a new latch, which stays.
//
// What the condition cannot see: updates between the read and the delete that leave
// a count at the value read (+1 then -1) write a newer version the delete does not
// hide, so that count cell survives, without its marker (it then lives until its own
// TTL, and AddLatch treats it as a cell a Java client wrote); and at level XDC a cell
// that an update from a farm without a cell creates in between (with its own marker,
// ending with the latch) survives too. Both need a concurrent update racing the delete.
func (s *Store) DeleteLatch(ctx context.Context, k dcsync.Key) error {
	const op = "hbase.DeleteLatch"
	if err := driver.CheckLatch(k, 0); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	if err := s.ready(ctx, op, &s.latches); err != nil {
		return err
	}
	row := layout.HBaseLatchRow(k.Client, k.Name)
	notFound := func() error { return driver.Errorf(dcsync.NotFound, op, "latch %s does not exist", k) }
	waits := 0
	for try := 0; try < maxTries; try++ {
		cells, now, err := s.db.GetWithClock(ctx, s.latchTable, row, famLatch, hbaserpc.Column{Family: famLatch})
		if err != nil {
			return wrap(err, op)
		}
		r := parseLatchView(cells)
		if err := r.collision(op, k); err != nil {
			return err
		}
		del, ok := r.deletion(k, now)
		if !ok {
			return notFound()
		}
		// The markers are stamped at the versions read, and hide every version at or
		// before them, a later Put of the same millisecond too. Wait until the server's
		// clock has passed the newest of them, so that the delete is applied, and any
		// create after it is stamped, later than every marker.
		var newest int64
		for _, c := range del {
			newest = max(newest, c.Timestamp)
		}
		if lag := newest - now; lag >= 0 && lag < maxClockWaitMs && waits < maxClockWaits {
			waits++
			try--
			if err := sleepCtx(ctx, time.Duration(lag+1)*time.Millisecond); err != nil {
				return driver.Errorf(dcsync.Connection, op, "%w", err)
			}
			continue
		}
		conds := make([]hbaserpc.Condition, 0, len(del))
		muts := make([]hbaserpc.Mutation, 0, len(del))
		for _, c := range del {
			muts = append(muts, &hbaserpc.Delete{Columns: []hbaserpc.Column{{Family: famLatch, Qualifier: c.Qualifier}}, Timestamp: c.Timestamp})
			if _, isCount := layout.ParseHBaseLatchQualifier(c.Qualifier); isCount {
				conds = append(conds, hbaserpc.IfEquals(famLatch, c.Qualifier, c.Value))
			} else if _, isMarker := parseMarker(c); isMarker {
				conds = append(conds, hbaserpc.IfEquals(famLatch, c.Qualifier, zero8))
			}
		}
		applied, _, err := s.db.CheckAndMutate(ctx, s.latchTable, row, hbaserpc.IfAll(conds...), muts...)
		if err != nil {
			if !inDoubt(err) {
				return wrap(err, op)
			}
			// The reply was lost: the delete was applied when no version read is still
			// there (the markers stamped at those versions hide them for good).
			after, rerr := s.db.Get(ctx, s.latchTable, row, hbaserpc.Column{Family: famLatch})
			if rerr != nil {
				return wrap(err, op)
			}
			if !anyStill(after, del) {
				return nil
			}
			s.log.Debug("hbase: latch delete in doubt and not applied; starting over", "key", k.String(), "try", try, "err", err)
			continue
		}
		if applied {
			return nil
		}
		s.log.Debug("hbase: latch delete not applied (the latch changed); reading again", "key", k.String(), "try", try)
	}
	return driver.Errorf(dcsync.RetriesExhausted, op, "latch %s kept changing; delete not applied after %d tries", k, maxTries)
}

// deletion returns the cells DeleteLatch deletes for k from the row as read with the
// server clock now, and false when k's latch is not alive: no count cell of k (DC:
// k.Farm's, XDC: any) that has no marker or whose marker has not ended by now.
func (r latchView) deletion(k dcsync.Key, now int64) ([]hbaserpc.Cell, bool) {
	alive := func(farm string) bool {
		m, ok := r.markerOf(farm)
		return !ok || m.endsMs > now
	}
	live := false
	for farm := range r.counts {
		if (k.Level == dcsync.XDC || farm == k.Farm) && alive(farm) {
			live = true
		}
	}
	if !live {
		return nil, false
	}
	if k.Level == dcsync.XDC || len(r.counts) == 1 {
		// The latch row holds nothing else: delete every cell read.
		return r.cells, true
	}
	q := layout.HBaseLatchQualifier(k.Farm)
	var out []hbaserpc.Cell
	for _, c := range r.cells {
		if bytes.Equal(c.Qualifier, q) {
			out = append(out, c)
		} else if m, ok := parseMarker(c); ok && m.id.Farm == k.Farm {
			out = append(out, c)
		}
	}
	return out, true
}

// anyStill reports whether after (the row read again) still holds a version of a cell
// of del at or before the timestamp del read.
func anyStill(after, del []hbaserpc.Cell) bool {
	for _, a := range after {
		for _, d := range del {
			if bytes.Equal(a.Qualifier, d.Qualifier) && a.Timestamp <= d.Timestamp {
				return true
			}
		}
	}
	return false
}
