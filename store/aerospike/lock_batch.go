package aerospike

import (
	"context"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.LockBatcher = (*Store)(nil)

// RefreshLocks implements driver.LockBatcher: every lease of reqs is refreshed as
// RefreshLock refreshes one (the same filtered write, so the same late-write
// guarantees), all in one BatchOperate, which the client splits into one command per
// server node: one record per lock, its write. Unlike RefreshLock it does not read the
// fence record, so a result's Token is 0 (the holder knows its token), except for a
// record written before issue 15, which carries its own. Commands are bounded by bytes
// (lockBatchBytes), not by a count of records: the server (8.1) sets no limit by
// default (service batch-max-requests 0), and one that sets one is answered by halving
// (runBatchUpTo), so 10,000 locks on one node are one command. Locks whose write was
// filtered out are read in one more batch, as RefreshLock reads one; a lock lost in the
// batch changes nothing for the others.
func (s *Store) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	return s.refreshLocks(ctx, "aerospike.RefreshLocks", reqs, false)
}

// InspectLocks implements driver.LockBatcher: every lock of keys is read as InspectLock
// reads one (its lock record and its fence record), all in one BatchOperate: two
// records per lock, in commands bounded by bytes as RefreshLocks'.
func (s *Store) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return s.inspectLocks(ctx, "aerospike.InspectLocks", keys)
}

// lockBatchRecordBytes is a bound on the size of one record of a lock batch (key
// digest, filter expression, operations) beside the owner id; lockBatchBytes bounds
// one command (the client takes up to 120 MiB).
const (
	lockBatchRecordBytes = 256
	lockBatchBytes       = queueBatchBytes
)

// runLockBatch runs recs as runBatchUpTo does, in commands of at most lockBatchBytes,
// owner(i) being the owner id in record i (or "").
func (s *Store) runLockBatch(ctx context.Context, op string, write bool, recs []as.BatchRecordIfc, owner func(int) string) error {
	size := func(i int) int { return lockBatchRecordBytes + len(owner(i)) }
	return s.runBatchUpTo(ctx, op, write, recs, 0, size, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT)
}

// refreshFilter is true while owner holds the lock with less than ttl left: the state a
// refresh to ttl replaces.
func refreshFilter(owner string, ttl time.Duration) *as.Expression {
	return as.ExpAnd(heldBy(owner),
		as.ExpLess(as.ExpNumSub(as.ExpIntBin(LeaseBin), as.ExpSinceUpdate()), as.ExpIntVal(ceilMS(ttl))))
}

// failed is the error of a lock whose batch records got no outcome: the batch's.
func failed(op string, err error) error {
	if err == nil {
		return driver.Errorf(dcsync.Internal, op, "a batch record has no outcome")
	}
	return err
}

// final reports whether a batch record has an outcome (not a failure to retry): OK
// with the record read or written, or one of the outcomes a lock batch expects. A
// record left OK with no record is not one: the client can leave a record so (its
// one-record path sets the record and OK before it looks at the error; the queue's
// scale benchmark at P = 4,096 met one, and InspectLocks dereferenced the nil record).
func final(br *as.BatchRecord) bool {
	switch br.ResultCode {
	case types.OK:
		return br.Record != nil
	case types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT:
		return true
	}
	return false
}

// refreshLocks refreshes reqs; withToken also reads each lock's fence record, for the
// token (RefreshLock), in the same batch.
func (s *Store) refreshLocks(ctx context.Context, op string, reqs []driver.LockRefresh, withToken bool) ([]driver.LockResult, error) {
	locks := make([]*as.Key, len(reqs))
	fences := make([]*as.Key, len(reqs))
	for i, r := range reqs {
		if err := s.checkLease(r.Key, r.Owner, r.TTL); err != nil {
			return nil, err
		}
		var err error
		if locks[i], fences[i], err = s.lockKeys(r.Key); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, driver.Errorf(dcsync.Connection, op, "%w", err)
	}
	per := 1 // records per lock in a batch
	if withToken {
		per = 2
	}
	out := make([]driver.LockResult, len(reqs))
	lost := func(i int) {
		out[i].Err = driver.Errorf(dcsync.LockLost, op, "%s does not hold lock %s", reqs[i].Owner, reqs[i].Key)
	}
	// fence returns the fence bins read for the j-th lock of recs (nil without token).
	fence := func(recs []as.BatchRecordIfc, j int) (as.BinMap, bool) {
		if !withToken {
			return nil, true
		}
		return fenceBins(recs[per*j+1]), final(recs[per*j+1].BatchRec())
	}
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; len(pending) > 0; round++ {
		if round == maxRounds {
			for _, i := range pending {
				out[i].Err = driver.Errorf(dcsync.RetriesExhausted, op,
					"lock %s: its lease changed under %d tries to refresh it", reqs[i].Key, maxRounds)
			}
			break
		}
		recs := make([]as.BatchRecordIfc, 0, per*len(pending))
		for _, i := range pending {
			r := reqs[i]
			wp := as.NewBatchWritePolicy()
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.Expiration = lockTTL(r.TTL)
			wp.FilterExpression = refreshFilter(r.Owner, r.TTL)
			recs = append(recs, as.NewBatchWrite(wp, locks[i], as.PutOp(as.NewBin(LeaseBin, ceilMS(r.TTL))), as.GetBinOp(AcqBin), as.GetBinOp(TokenBin)))
			if withToken {
				recs = append(recs, as.NewBatchReadOps(nil, fences[i], fenceReadOps()...))
			}
		}
		sent := time.Now()
		err := s.runLockBatch(ctx, op, true, recs, func(j int) string { return reqs[pending[j/per]].Owner })
		var check []int
		for j, i := range pending {
			w := recs[per*j].BatchRec()
			fb, fok := fence(recs, j)
			switch {
			case !final(w) || !fok:
				out[i].Err = failed(op, err)
			case w.ResultCode == types.KEY_NOT_FOUND_ERROR:
				lost(i)
			case w.ResultCode == types.FILTERED_OUT:
				check = append(check, i) // not ours, lapsed, or more than ttl left: read which
			default:
				st := lockState(w.Record, fb, sent)
				st.Owner, st.Expires = reqs[i].Owner, sent.Add(reqs[i].TTL)
				out[i].State = st
			}
		}
		pending = nil
		if len(check) == 0 {
			break
		}
		reads := make([]as.BatchRecordIfc, 0, per*len(check))
		for _, i := range check {
			if withToken {
				reads = append(reads, s.lockReads(locks[i], fences[i], heldBy(reqs[i].Owner))...)
				continue
			}
			p := as.NewBatchReadPolicy()
			p.FilterExpression = heldBy(reqs[i].Owner)
			reads = append(reads, as.NewBatchReadOps(p, locks[i], lockReadOps()...))
		}
		err = s.runLockBatch(ctx, op, false, reads, func(int) string { return "" })
		now := time.Now()
		for j, i := range check {
			l := reads[per*j].BatchRec()
			fb, fok := fence(reads, j)
			switch {
			case !final(l) || !fok:
				out[i].Err = failed(op, err)
			case l.ResultCode != types.OK:
				lost(i)
			default:
				if left, ok := intOf(l.Record.Bins[rLeft]); !ok || left < ceilMS(reqs[i].TTL) {
					pending = append(pending, i) // less than ttl left by now: write it
					continue
				}
				st := lockState(l.Record, fb, now)
				st.Owner, st.Expires = reqs[i].Owner, sent.Add(reqs[i].TTL)
				out[i].State = st
			}
		}
	}
	return out, nil
}

func (s *Store) inspectLocks(ctx context.Context, op string, keys []dcsync.Key) ([]driver.LockResult, error) {
	recs := make([]as.BatchRecordIfc, 0, 2*len(keys))
	for _, k := range keys {
		if err := driver.ValidateKey("lock", k); err != nil {
			return nil, err
		}
		if err := s.checkKey(k); err != nil {
			return nil, err
		}
		key, fence, err := s.lockKeys(k)
		if err != nil {
			return nil, err
		}
		recs = append(recs, s.lockReads(key, fence, alive())...)
	}
	if err := ctx.Err(); err != nil {
		return nil, driver.Errorf(dcsync.Connection, op, "%w", err)
	}
	out := make([]driver.LockResult, len(keys))
	err := s.runLockBatch(ctx, op, false, recs, func(int) string { return "" })
	now := time.Now()
	for i, k := range keys {
		l, f := recs[2*i].BatchRec(), recs[2*i+1].BatchRec()
		switch {
		case !final(l) || !final(f):
			out[i].Err = failed(op, err)
		case l.ResultCode != types.OK:
			out[i].Err = driver.Errorf(dcsync.NotFound, op, "lock %s is free", k)
		default:
			out[i].State = lockState(l.Record, fenceBins(recs[2*i+1]), now)
		}
	}
	return out, nil
}
