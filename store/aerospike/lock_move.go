package aerospike

import (
	"context"
	mrand "math/rand/v2"
	"slices"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/layout"
)

var _ driver.LockMover = (*Store)(nil)

// moveBatch sends recs in one BatchOperate (the client sends one command per server
// node) until every record has an outcome: OK or a result code in expect. Records that
// failed transiently are sent again, the others not, under the store's retry rules, as
// runBatchUpTo does; unlike it, it records in doubt[i] (when doubt is not nil) that a
// failed try of record i may have been applied, which a release needs to decide
// (ReleaseLock's a.inDoubt). The error is the last failure of the records left without
// an outcome (nil when every record has one).
func (s *Store) moveBatch(ctx context.Context, op string, recs []as.BatchRecordIfc, doubt []bool, expect ...types.ResultCode) error {
	if len(recs) == 0 {
		return nil
	}
	pending := make([]int, len(recs))
	for i := range pending {
		pending[i] = i
	}
	final := func(rc types.ResultCode) bool { return rc == types.OK || slices.Contains(expect, rc) }
	return s.retry(ctx, op, true, func(*attempt) error {
		chunk := make([]as.BatchRecordIfc, len(pending))
		for j, i := range pending {
			br := recs[i].BatchRec()
			br.Record, br.Err, br.ResultCode, br.InDoubt = nil, nil, types.NO_RESPONSE, false
			chunk[j] = recs[i]
		}
		berr := s.client.BatchOperate(s.batchPolicy(ctx), chunk)
		var next []int
		var first error
		for _, i := range pending {
			br := recs[i].BatchRec()
			var err error
			switch {
			case br.ResultCode == types.NO_RESPONSE:
				err = berr
				if err == nil {
					err = &as.AerospikeError{ResultCode: types.NO_RESPONSE}
				}
				if rc, ok := resultCode(berr); ok && len(chunk) == 1 && final(rc) {
					br.ResultCode = rc // a one-record batch's error may be the record's own
					continue
				}
			case final(br.ResultCode):
				continue
			default:
				err = batchErr(br)
			}
			if doubt != nil && (br.InDoubt || !surelyNotApplied(err)) {
				doubt[i] = true
			}
			if !transient(err) {
				return err
			}
			next = append(next, i)
			if first == nil || busy(first) {
				first = err
			}
		}
		pending = next
		return first
	})
}

// moveTake is one lock of an AcquireLocks batch.
type moveTake struct {
	i          int
	key, fence *as.Key
	acq        int64
	bins       []*as.Bin
	ttl        time.Duration
	token      int64
}

// AcquireLocks implements driver.LockMover: it takes the locks of reqs as AcquireLock
// takes one, each of its steps for every lock in one BatchOperate (one command per
// server node), in AcquireLock's order:
//
//  1. Take each lock record with AcquireLock's put (the Java bins, owner, lease,
//     identity and a fresh acquisition id) expecting generation 0; for those held, the
//     put that replaces a record whose lease has lapsed; for those still held, a read
//     of the lock and fence records: held by someone else (LockUnavailable with the
//     holder's state), ours (an in-doubt try landed: its acquisition id), or gone
//     between the put and the read (the steps again for it, at most Config.Attempts
//     times, as AcquireLock's tries).
//  2. Only then, for the locks taken, number each acquisition on its fence record
//     (numberOps, filtered on the acquisition having no number yet; a filtered try
//     reads the number an earlier one got). Sending it only after the take landed is
//     what makes tokens strictly increase (see AcquireLock); the batch keeps it.
//
// A lock whose numbering failed, or whose lease ran out (by the time since the batch
// started) before it was numbered, has its record deleted if it is still its own and
// reports the error or LockUnavailable, as AcquireLock does. A key named a second time
// in the batch (or another key with the same Aerospike record) is acquired by
// AcquireLock after the batch, in the order of the requests: it finds the record
// held. Result i belongs to reqs[i].
func (s *Store) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	const op = "aerospike.AcquireLocks"
	const lop = "aerospike.AcquireLock"
	takes := make([]*moveTake, 0, len(reqs))
	alone := make([]bool, len(reqs))
	seen := make(map[string]bool, len(reqs))
	for i, r := range reqs {
		if err := s.checkLease(r.Key, r.Owner, r.TTL); err != nil {
			return nil, err
		}
		key, fence, err := s.lockKeys(r.Key)
		if err != nil {
			return nil, err
		}
		d := string(key.Digest())
		if seen[d] {
			alone[i] = true
			continue
		}
		seen[d] = true
		acq := mrand.Int64()
		takes = append(takes, &moveTake{i: i, key: key, fence: fence, acq: acq, ttl: r.TTL, bins: []*as.Bin{
			as.NewBin(layout.AerospikeLockDataBin(r.Key.Farm), 1),
			as.NewBin(layout.AerospikeLockUATBin(r.Key.Farm), time.Now().UnixMilli()),
			as.NewBin(OwnerBin, r.Owner),
			as.NewBin(LeaseBin, ceilMS(r.TTL)),
			as.NewBin(IdentityBin, layout.IdentityKey(r.Key)),
			as.NewBin(AcqBin, acq),
		}})
	}
	if err := ctx.Err(); err != nil {
		return nil, driver.Errorf(dcsync.Connection, op, "%w", err)
	}
	out := make([]driver.LockResult, len(reqs))
	puts := func(t *moveTake) []*as.Operation {
		ops := make([]*as.Operation, len(t.bins))
		for j, b := range t.bins {
			ops[j] = as.PutOp(b)
		}
		return ops
	}
	start := time.Now()

	// 1. Take the lock records.
	var taken []*moveTake
	pending := takes
	for round := 1; len(pending) > 0; round++ {
		recs := make([]as.BatchRecordIfc, len(pending))
		for j, t := range pending {
			wp := as.NewBatchWritePolicy()
			wp.Expiration = lockTTL(t.ttl)
			wp.GenerationPolicy, wp.Generation = as.EXPECT_GEN_EQUAL, 0
			recs[j] = as.NewBatchWrite(wp, t.key, puts(t)...)
		}
		err := s.moveBatch(ctx, lop, recs, nil, types.GENERATION_ERROR)
		var held []*moveTake
		for j, t := range pending {
			switch br := recs[j].BatchRec(); br.ResultCode {
			case types.OK:
				taken = append(taken, t)
			case types.GENERATION_ERROR:
				held = append(held, t)
			default:
				out[t.i].Err = s.moveErr(lop, br, err)
			}
		}
		// Held, or a lapsed lease: take that over, replacing every bin.
		recs = make([]as.BatchRecordIfc, len(held))
		for j, t := range held {
			wp := as.NewBatchWritePolicy()
			wp.Expiration = lockTTL(t.ttl)
			wp.RecordExistsAction = as.REPLACE
			wp.FilterExpression = lapsed()
			recs[j] = as.NewBatchWrite(wp, t.key, puts(t)...)
		}
		err = s.moveBatch(ctx, lop, recs, nil, types.FILTERED_OUT)
		var read []*moveTake
		for j, t := range held {
			switch br := recs[j].BatchRec(); br.ResultCode {
			case types.OK:
				taken = append(taken, t)
			case types.FILTERED_OUT:
				read = append(read, t)
			default:
				out[t.i].Err = s.moveErr(lop, br, err)
			}
		}
		recs = make([]as.BatchRecordIfc, 0, 2*len(read))
		for _, t := range read {
			recs = append(recs, s.lockReads(t.key, t.fence, nil)...)
		}
		err = s.moveBatch(ctx, lop, recs, nil, types.KEY_NOT_FOUND_ERROR)
		pending = nil
		for j, t := range read {
			lr, fr := recs[2*j].BatchRec(), recs[2*j+1].BatchRec()
			switch {
			case !final(lr) || !final(fr):
				out[t.i].Err = s.moveErr(lop, lr, err)
			case lr.ResultCode == types.KEY_NOT_FOUND_ERROR:
				// Released or expired between the put and the read: try again.
				if round < s.cfg.Attempts {
					pending = append(pending, t)
					continue
				}
				out[t.i].Err = driver.Errorf(dcsync.LockUnavailable, lop, "lock %s is held", reqs[t.i].Key)
			default:
				if got, ok := intOf(lr.Record.Bins[AcqBin]); ok && got == t.acq {
					taken = append(taken, t) // an in-doubt try of ours landed
					continue
				}
				k := reqs[t.i].Key
				out[t.i].State = lockState(lr.Record, fenceBins(recs[2*j+1]), time.Now())
				holderID := stringOf(lr.Record.Bins[IdentityBin])
				if other, ok := layout.ParseIdentityKey(holderID); ok && holderID != layout.IdentityKey(k) {
					out[t.i].Err = driver.Errorf(dcsync.LockUnavailable, lop,
						"lock %s is held by the lock of client %q, name %q, which has the same Aerospike key %q (the Java layout joins ids with '#' unescaped)",
						k, other.Client, other.Name, layout.AerospikeLockKey(k.Client, k.Name))
					continue
				}
				out[t.i].Err = driver.Errorf(dcsync.LockUnavailable, lop, "lock %s is held", k)
			}
		}
	}

	// 2. As the holders, number the acquisitions.
	if len(taken) > 0 {
		recs := make([]as.BatchRecordIfc, len(taken))
		for j, t := range taken {
			wp := as.NewBatchWritePolicy()
			wp.Expiration = as.TTLDontExpire
			wp.FilterExpression = unnumbered(t.acq)
			recs[j] = as.NewBatchWrite(wp, t.fence, numberOps(t.acq)...)
		}
		err := s.moveBatch(ctx, lop, recs, nil, types.FILTERED_OUT)
		var again []*moveTake
		for j, t := range taken {
			br := recs[j].BatchRec()
			switch {
			case br.ResultCode == types.FILTERED_OUT:
				again = append(again, t) // an earlier try landed: read its number
			case !final(br):
				out[t.i].Err = s.moveErr(lop, br, err)
			default:
				n, ok := intOf(br.Record.Bins[FenceBin])
				if !ok || n <= 0 {
					out[t.i].Err = driver.Errorf(dcsync.Internal, lop, "fence record of %s holds %v", reqs[t.i].Key, br.Record.Bins[FenceBin])
					continue
				}
				t.token = n
			}
		}
		recs = make([]as.BatchRecordIfc, len(again))
		for j, t := range again {
			recs[j] = as.NewBatchReadOps(nil, t.fence, as.GetBinOp(AcqsBin))
		}
		err = s.moveBatch(ctx, lop, recs, nil)
		for j, t := range again {
			br := recs[j].BatchRec()
			if !final(br) {
				out[t.i].Err = s.moveErr(lop, br, err)
				continue
			}
			n, ok := acqNumber(br.Record.Bins, t.acq)
			if !ok {
				out[t.i].Err = driver.Errorf(dcsync.Internal, lop, "fence record of %s has no number for this acquisition, yet refused to give one: %v", reqs[t.i].Key, br.Record.Bins)
				continue
			}
			t.token = n
		}
		late := time.Since(start)
		for _, t := range taken {
			r := reqs[t.i]
			switch {
			case out[t.i].Err != nil:
				s.abandon(t.key, t.acq)
			case late >= r.TTL:
				// The lease may have lapsed before the number was taken: a later holder
				// may hold a smaller one.
				s.abandon(t.key, t.acq)
				out[t.i].Err = driver.Errorf(dcsync.LockUnavailable, lop, "lock %s: its lease of %v ran out while it was being acquired", r.Key, r.TTL)
			default:
				out[t.i].State = driver.LockState{Owner: r.Owner, Token: uint64(t.token), Expires: start.Add(r.TTL)}
			}
		}
	}
	for i, r := range reqs {
		if alone[i] {
			out[i].State, out[i].Err = s.AcquireLock(ctx, r.Key, r.Owner, r.TTL)
		}
	}
	return out, nil
}

// moveErr is the error of a record of a lock batch that got no expected outcome: its
// own, or the batch's (err) when it has none.
func (s *Store) moveErr(op string, br *as.BatchRecord, err error) error {
	if br.ResultCode != types.NO_RESPONSE && br.ResultCode != types.OK {
		return s.serverError(op, batchErr(br))
	}
	return failed(op, err)
}

// ReleaseLocks implements driver.LockMover: it deletes the lock records of reqs as
// ReleaseLock deletes one (filtered on the owner bin and more than releaseGrace of the
// lease left, so another holder's lock is left alone), all in one BatchOperate (one
// command per server node). Filtered out or not found is LockLost, except a record not
// found after a try in doubt (it was ours when that try was sent: released), as
// ReleaseLock decides. A key named a second time in the batch is released by
// ReleaseLock after the batch (LockLost, once the first released it). Result i belongs
// to reqs[i].
func (s *Store) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	const op = "aerospike.ReleaseLocks"
	const lop = "aerospike.ReleaseLock"
	alone := make([]bool, len(reqs))
	seen := make(map[string]bool, len(reqs))
	var recs []as.BatchRecordIfc
	var idx []int
	for i, r := range reqs {
		if err := s.checkLock(r.Key, r.Owner); err != nil {
			return nil, err
		}
		key, err := s.lockKey(r.Key)
		if err != nil {
			return nil, err
		}
		d := string(key.Digest())
		if seen[d] {
			alone[i] = true
			continue
		}
		seen[d] = true
		p := as.NewBatchDeletePolicy()
		p.FilterExpression = releasable(r.Owner)
		p.DurableDelete = s.cfg.DurableDelete
		recs, idx = append(recs, as.NewBatchDelete(p, key)), append(idx, i)
	}
	if err := ctx.Err(); err != nil {
		return nil, driver.Errorf(dcsync.Connection, op, "%w", err)
	}
	out := make([]driver.LockResult, len(reqs))
	doubt := make([]bool, len(recs))
	err := s.moveBatch(ctx, lop, recs, doubt, types.FILTERED_OUT, types.KEY_NOT_FOUND_ERROR)
	for j, i := range idx {
		r := reqs[i]
		switch br := recs[j].BatchRec(); {
		case br.ResultCode == types.OK:
		case br.ResultCode == types.FILTERED_OUT, br.ResultCode == types.KEY_NOT_FOUND_ERROR && !doubt[j]:
			out[i].Err = driver.Errorf(dcsync.LockLost, lop, "%s does not hold lock %s", r.Owner, r.Key)
		case br.ResultCode == types.KEY_NOT_FOUND_ERROR:
			// A try in doubt deleted it: it was ours when it was sent.
		default:
			out[i].Err = s.moveErr(lop, br, err)
		}
	}
	for i, r := range reqs {
		if alone[i] {
			out[i].Err = s.ReleaseLock(ctx, r.Key, r.Owner)
		}
	}
	return out, nil
}
