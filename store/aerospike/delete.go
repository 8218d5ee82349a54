package aerospike

import (
	"context"
	"sync"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/layout"
)

var _ driver.LatchDeleter = (*Store)(nil)

// DeleteLatch implements driver.LatchDeleter, atomically per record: one write whose
// filter expression requires, on the server, that the record is this latch's
// (identityOK: else InvalidArgument naming both latches, nothing written) and that the
// latch exists (DC: the caller's cell is alive, cellAlive; XDC: any cell is,
// latchAlive: else NotFound, nothing written).
//
// At level DC one operate removes the caller's count bin and its entry in EndsBin and
// leaves the record's TTL alone (TTL_DONT_UPDATE); the other farms' cells keep their
// counts and ends. When the caller's entry was the record's only one, the entry is kept
// but set to the server's time instead: the latch has ended (an empty EndsBin would
// leave latchEnd undefined, and no EndsBin would make the record look like a live Java
// latch). The dead record then stays until its TTL removes it or a create replaces it,
// as after any latch's end; a count cell a Java client added without an entry lived by
// that latch end and ends with it. In a Java-written record (no EndsBin) only the count
// bin is removed; when it was the record's last bin, the server deletes the record.
//
// At level XDC the record is deleted, every farm's cell with it, Java-written records
// (no dcsync bins, so no identity to check) included; Config.DurableDelete applies, as
// to lock releases.
//
// Incarnations: the delete first reads the end that names the latch's incarnation (DC:
// the caller's cell's end; XDC: the latch's end; see latchIncarnation) and its filter
// requires that same end (or, for a record read without EndsBin, still none). So a try
// that lands late, after the latch was deleted and a new latch of the same name was
// created, finds another end and changes nothing (TestLatchLateDelete). An end changed
// under the delete by another write (a DC create in another farm moving an XDC latch's
// end) makes it read again, at most maxRounds times.
//
// Retries: a try whose outcome is unknown (in doubt) may have deleted the latch, so a
// retry that finds it gone (filtered out, or no record) reports success rather than
// NotFound, unless the record then belongs to another latch.
func (s *Store) DeleteLatch(ctx context.Context, k dcsync.Key) error {
	const op = "aerospike.DeleteLatch"
	if err := driver.CheckLatch(k, 0); err != nil {
		return err
	}
	if err := s.checkKey(k); err != nil {
		return err
	}
	key, err := s.latchKey(k)
	if err != nil {
		return err
	}
	ident := latchIdentity(k)
	for round := 0; round < maxRounds; round++ {
		end, err := s.readIncarnation(ctx, op, key, k)
		if err != nil {
			return err
		}
		again, err := s.deleteLatch(ctx, op, k, key, ident, sameIncarnation(k, end))
		if !again {
			return err
		}
	}
	return driver.Errorf(dcsync.RetriesExhausted, op, "latch %s: the record changed under %d tries to delete it", k, maxRounds)
}

// rEnd names the value readIncarnation's expression op returns.
const rEnd = "dcsync_r_end"

// latchIncarnation is the end that names a latch's incarnation in a record with
// EndsBin: at level DC the caller's cell's end (its entry, or the latch's end for a
// cell without one), at level XDC the latch's end. A latch created again after a
// delete or its end has another end (it is created later; an equal end would need the
// same millisecond and TTL).
func latchIncarnation(k dcsync.Key) *as.Expression {
	if k.Level == dcsync.XDC {
		return latchEnd()
	}
	return as.ExpCond(hasEntry(k.Farm), entry(k.Farm), latchEnd())
}

// maxIncarnations bounds the latches whose incarnation a Store remembers.
const maxIncarnations = 4096

// incarnations remembers, per latch key, the incarnation (latchIncarnation, -1: none)
// the Store last saw, so that a count update is filtered on it without a read first.
type incarnations struct {
	mu sync.Mutex
	m  map[dcsync.Key]int64
}

func (c *incarnations) get(k dcsync.Key) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end, ok := c.m[k]
	return end, ok
}

func (c *incarnations) put(k dcsync.Key, end int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxIncarnations {
		c.m = map[dcsync.Key]int64{}
	}
	c.m[k] = end
}

// incKey is the key incarnations keeps k under (a DC latch's incarnation is its farm's
// cell, an XDC latch's the record).
func incKey(k dcsync.Key) dcsync.Key {
	if k.Level == dcsync.XDC {
		k.Farm = ""
	}
	return k
}

// sawIncarnation keeps the incarnation a write's reply read (incarnationOp) for k.
func (s *Store) sawIncarnation(k dcsync.Key, rec *as.Record) {
	if rec == nil {
		return
	}
	if n, ok := intOf(rec.Bins[rEnd]); ok {
		s.incs.put(incKey(k), n)
	}
}

// incarnationOp reads latchIncarnation into rEnd (-1 without EndsBin).
func incarnationOp(k dcsync.Key) *as.Operation {
	return as.ExpReadOp(rEnd, as.ExpCond(hasEnds(), latchIncarnation(k), as.ExpIntVal(-1)), as.ExpReadFlagDefault)
}

// readIncarnation reads latchIncarnation of the record at key: -1 when the record has
// no EndsBin or does not exist.
func (s *Store) readIncarnation(ctx context.Context, op string, key *as.Key, k dcsync.Key) (int64, error) {
	end := int64(-1)
	err := s.retry(ctx, op, false, func(*attempt) error {
		rec, err := s.client.Operate(s.writePolicy(ctx, 0), key, incarnationOp(k))
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR):
			end = -1
			return nil
		case err != nil:
			return err
		}
		end = -1
		if n, ok := intOf(rec.Bins[rEnd]); ok {
			end = n
		}
		return nil
	})
	return end, err
}

// sameIncarnation is true when the record's latchIncarnation is end (-1: the record
// has no EndsBin).
func sameIncarnation(k dcsync.Key, end int64) *as.Expression {
	if end < 0 {
		return as.ExpNot(hasEnds())
	}
	return as.ExpAnd(hasEnds(), as.ExpEq(latchIncarnation(k), as.ExpIntVal(end)))
}

// deleteLatch is one round of DeleteLatch, its writes filtered on incarnation too. It
// returns again when the latch is alive but was filtered out (its end changed since it
// was read).
func (s *Store) deleteLatch(ctx context.Context, op string, k dcsync.Key, key *as.Key, ident string, incarnation *as.Expression) (again bool, err error) {
	var gone, inDoubt bool
	if k.Level == dcsync.XDC {
		err = s.retry(ctx, op, true, func(a *attempt) error {
			wp := s.writePolicy(ctx, 0)
			wp.FilterExpression = as.ExpAnd(identityOK(ident), latchAlive(), incarnation)
			wp.DurableDelete = s.cfg.DurableDelete
			existed, err := s.client.Delete(wp, key)
			inDoubt = a.inDoubt
			switch {
			case hasCode(err, types.FILTERED_OUT):
				gone = true
				return nil
			case err != nil:
				return err
			}
			gone = !existed
			return nil
		})
	} else {
		bin := layout.AerospikeLatchBin(k.Farm)
		others := as.ExpMapRemoveByKey(as.ExpStringVal(k.Farm), endsMap())
		endNow := as.ExpMapPut(as.DefaultMapPolicy(), as.ExpStringVal(k.Farm), serverNow(), endsMap())
		ends := as.ExpCond(
			as.ExpNot(hasEnds()), as.ExpUnknown(),
			as.ExpGreater(as.ExpMapSize(others), as.ExpIntVal(0)), others,
			endNow)
		ops := []*as.Operation{
			as.PutOp(as.NewBin(bin, nil)),
			as.ExpWriteOp(EndsBin, ends, as.ExpWriteFlagEvalNoFail),
		}
		err = s.retry(ctx, op, true, func(a *attempt) error {
			wp := s.writePolicy(ctx, as.TTLDontUpdate)
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.FilterExpression = as.ExpAnd(identityOK(ident), cellAlive(k.Farm), incarnation)
			wp.DurableDelete = s.cfg.DurableDelete
			_, err := s.client.Operate(wp, key, ops...)
			inDoubt = a.inDoubt
			switch {
			case hasCode(err, types.FILTERED_OUT, types.KEY_NOT_FOUND_ERROR):
				gone = true
				return nil
			case err != nil:
				return err
			}
			gone = false
			return nil
		})
	}
	if err != nil || !gone {
		return false, err
	}
	// Refused or absent: another latch's record, a latch that does not exist, one whose
	// end changed since it was read, or (after an in-doubt try) one this call deleted.
	st, err := s.readState(ctx, op, key, k.Farm, opID{})
	if err != nil {
		return false, err
	}
	if st.exists && st.identity != "" && st.identity != ident {
		return false, collision(op, k, st.identity)
	}
	if inDoubt {
		s.log.Debug("aerospike: in-doubt delete found the latch gone; taking it as deleted", "key", k.String())
		return false, nil
	}
	if k.Level == dcsync.XDC && st.latchAlive || k.Level == dcsync.DC && st.cellAlive {
		return true, nil // another incarnation, or its end changed: read it again
	}
	return false, driver.Errorf(dcsync.NotFound, op, "latch %s does not exist", k)
}
