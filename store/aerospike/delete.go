package aerospike

import (
	"context"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/layout"
)

var _ dcsync.LatchDeleter = (*Store)(nil)

// DeleteLatch implements dcsync.LatchDeleter, atomically per record: one write whose
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
// Retries: a try whose outcome is unknown (in doubt) may have deleted the latch, so a
// retry that finds it gone (filtered out, or no record) reports success rather than
// NotFound, unless the record then belongs to another latch.
func (s *Store) DeleteLatch(ctx context.Context, k dcsync.Key) error {
	const op = "aerospike.DeleteLatch"
	if err := dcsync.CheckLatch(k, 0); err != nil {
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
	var gone, inDoubt bool
	if k.Level == dcsync.XDC {
		err = s.retry(ctx, op, true, func(a *attempt) error {
			wp := s.writePolicy(ctx, 0)
			wp.FilterExpression = as.ExpAnd(identityOK(ident), latchAlive())
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
			wp.FilterExpression = as.ExpAnd(identityOK(ident), cellAlive(k.Farm))
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
		return err
	}
	// Refused or absent: another latch's record, a latch that does not exist, or (after
	// an in-doubt try) one this call deleted.
	st, err := s.readState(ctx, op, key, k.Farm, opID{})
	if err != nil {
		return err
	}
	if st.exists && st.identity != "" && st.identity != ident {
		return collision(op, k, st.identity)
	}
	if inDoubt {
		s.log.Debug("aerospike: in-doubt delete found the latch gone; taking it as deleted", "key", k.String())
		return nil
	}
	return dcsync.Errorf(dcsync.NotFound, op, "latch %s does not exist", k)
}
