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
// server node (of at most 1,000 records each; every lock costs two: its write and a read
// of its fence record for the token). Locks whose write was filtered out are read in one
// more batch, as RefreshLock reads one; a lock lost in the batch changes nothing for the
// others.
func (s *Store) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	return s.refreshLocks(ctx, "aerospike.RefreshLocks", reqs)
}

// InspectLocks implements driver.LockBatcher: every lock of keys is read as InspectLock
// reads one (its lock record and its fence record), all in one BatchOperate.
func (s *Store) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return s.inspectLocks(ctx, "aerospike.InspectLocks", keys)
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

// final reports whether a batch record has an outcome (not a failure to retry).
func final(br *as.BatchRecord) bool {
	switch br.ResultCode {
	case types.OK, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT:
		return true
	}
	return false
}

func (s *Store) refreshLocks(ctx context.Context, op string, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
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
	out := make([]driver.LockResult, len(reqs))
	lost := func(i int) {
		out[i].Err = driver.Errorf(dcsync.LockLost, op, "%s does not hold lock %s", reqs[i].Owner, reqs[i].Key)
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
		recs := make([]as.BatchRecordIfc, 0, 2*len(pending))
		for _, i := range pending {
			r := reqs[i]
			wp := as.NewBatchWritePolicy()
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.Expiration = lockTTL(r.TTL)
			wp.FilterExpression = refreshFilter(r.Owner, r.TTL)
			recs = append(recs,
				as.NewBatchWrite(wp, locks[i], as.PutOp(as.NewBin(LeaseBin, ceilMS(r.TTL))), as.GetBinOp(AcqBin), as.GetBinOp(TokenBin)),
				as.NewBatchReadOps(nil, fences[i], fenceReadOps()...))
		}
		sent := time.Now()
		err := s.runBatch(ctx, op, true, recs, nil, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT)
		var check []int
		for j, i := range pending {
			w, f := recs[2*j].BatchRec(), recs[2*j+1].BatchRec()
			switch {
			case !final(w) || !final(f):
				out[i].Err = failed(op, err)
			case w.ResultCode == types.KEY_NOT_FOUND_ERROR:
				lost(i)
			case w.ResultCode == types.FILTERED_OUT:
				check = append(check, i) // not ours, lapsed, or more than ttl left: read which
			default:
				st := lockState(w.Record, fenceBins(recs[2*j+1]), sent)
				st.Owner, st.Expires = reqs[i].Owner, sent.Add(reqs[i].TTL)
				out[i].State = st
			}
		}
		pending = nil
		if len(check) == 0 {
			break
		}
		reads := make([]as.BatchRecordIfc, 0, 2*len(check))
		for _, i := range check {
			reads = append(reads, s.lockReads(locks[i], fences[i], heldBy(reqs[i].Owner))...)
		}
		err = s.runBatch(ctx, op, false, reads, nil, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT)
		now := time.Now()
		for j, i := range check {
			l, f := reads[2*j].BatchRec(), reads[2*j+1].BatchRec()
			switch {
			case !final(l) || !final(f):
				out[i].Err = failed(op, err)
			case l.ResultCode != types.OK:
				lost(i)
			default:
				if left, ok := intOf(l.Record.Bins[rLeft]); !ok || left < ceilMS(reqs[i].TTL) {
					pending = append(pending, i) // less than ttl left by now: write it
					continue
				}
				st := lockState(l.Record, fenceBins(reads[2*j+1]), now)
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
	err := s.runBatch(ctx, op, false, recs, nil, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT)
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
