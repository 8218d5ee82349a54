package aerospike

import (
	"context"
	mrand "math/rand/v2"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/layout"
)

func (s *Store) checkLock(k dcsync.Key, owner string) error {
	if err := driver.CheckLock(k, owner, 0); err != nil {
		return err
	}
	return s.checkKey(k)
}

// checkLease is checkLock for a request that starts or extends a lease.
func (s *Store) checkLease(k dcsync.Key, owner string, ttl time.Duration) error {
	if err := driver.CheckLease(k, owner, ttl); err != nil {
		return err
	}
	return s.checkKey(k)
}

// rLeft names the value lockReadOps' expression op returns: the ms left of a dcsync
// lease by the server's clock, or -1 for a Java lock.
const rLeft = "dcsync_r_left"

// lockReadOps read what lockState needs of a lock record: owner, acquisition id, token
// (a record written before fence records numbered acquisitions), and the lease left,
// computed by the server (lease - since_update) so that it is exact to the ms.
func lockReadOps() []*as.Operation {
	return []*as.Operation{
		as.GetBinOp(OwnerBin), as.GetBinOp(AcqBin), as.GetBinOp(TokenBin), as.GetBinOp(IdentityBin),
		as.ExpReadOp(rLeft, as.ExpCond(as.ExpBinExists(LeaseBin), as.ExpNumSub(as.ExpIntBin(LeaseBin), as.ExpSinceUpdate()),
			as.ExpIntVal(-1)), as.ExpReadFlagDefault),
	}
}

// lockState reads a lock record's state from the reply of lockReadOps, and the token
// from the fence record's bins (fenceReadOps; nil when not read): Owner is "" and Token
// 0 for a Java lock, whose lease ends with the record (its TTL, whole seconds).
//
// The token is the record's own TokenBin, which versions before issue 15 wrote, or else
// the number the fence record gave the record's acquisition (AcqBin, an entry of the
// fence's AcqsBin) when that number is the fence's latest (FenceBin, the counter); 0
// (unknown) otherwise. So every token a reader sees is the highest number given when
// it read, and tokens seen only go up, also for a record a late try of a take wrote:
// the take's gen-0 put, held back, can land after its acquisition was numbered and
// released and later ones numbered, and recreate the record with the old acquisition
// id, whose old number must not be shown after the later ones
// (TestLockLateTakeAfterRelease). The token is 0 while the acquisition has no number
// yet (between its two writes), when the fence has forgotten it (FencesKept later
// acquisitions), and for a holder whose number was followed by the number of an
// acquisition that gave up (its increment landed after its lease ran out, see
// AcquireLock) until the next acquisition: the holder's own AcquireLock reported its
// token, and only readers see 0.
func lockState(rec *as.Record, fence as.BinMap, now time.Time) driver.LockState {
	st := driver.LockState{Owner: stringOf(rec.Bins[OwnerBin])}
	if left, ok := intOf(rec.Bins[rLeft]); ok && left >= 0 {
		st.Expires = now.Add(time.Duration(left) * time.Millisecond)
	} else {
		st.Expires = expires(now, rec.Expiration)
	}
	if t, ok := intOf(rec.Bins[TokenBin]); ok && t > 0 {
		st.Token = uint64(t)
	} else if acq, ok := intOf(rec.Bins[AcqBin]); ok {
		last, _ := intOf(fence[FenceBin])
		if t, ok := acqNumber(fence, acq); ok && t == last {
			st.Token = uint64(t)
		}
	}
	return st
}

// fenceReadOps read what lockState needs of a fence record: the numbers it gave and
// its counter.
func fenceReadOps() []*as.Operation {
	return []*as.Operation{as.GetBinOp(AcqsBin), as.GetBinOp(FenceBin)}
}

// acqNumber returns the number the fence record (its bins) gave acquisition acq.
func acqNumber(fence as.BinMap, acq int64) (int64, bool) {
	m, _ := fence[AcqsBin].(map[any]any)
	for k, v := range m {
		if n, ok := intOf(k); ok && n == acq {
			return intOf(v)
		}
	}
	return 0, false
}

// The fence record numbers acquisitions. Its bins: FenceBin, the counter (the last
// number given), and AcqsBin, a map from acquisition id (AcqBin of the lock record) to
// the number it got, keeping the FencesKept highest numbers. One operate (numberOps)
// adds 1 to the counter and enters the new number under the acquisition's id, on
// condition that the id has no entry yet (unnumbered): so every try of it, however late
// it lands, gives the acquisition at most one number (TestLockLateFenceIncrement).

// FencesKept is how many acquisitions (the latest) a fence record keeps the number of.
const FencesKept = 16

// unnumbered is true on a fence record that has given acq no number yet.
func unnumbered(acq int64) *as.Expression {
	return as.ExpOr(as.ExpNot(hasAcqsExp),
		as.ExpNot(as.ExpMapGetByKey(as.MapReturnType.EXISTS, as.ExpTypeBOOL, as.ExpIntVal(acq), acqsMapExp)))
}

// numberOps take the next number for acq: the counter plus one, entered in AcqsBin
// (the expression reads the counter as the add left it, checked on the server, 8.1),
// returned.
func numberOps(acq int64) []*as.Operation {
	put := as.ExpMapPut(as.DefaultMapPolicy(), as.ExpIntVal(acq), fenceIntExp, acqsOrEmpty)
	kept := as.ExpMapRemoveByRankRange(as.MapReturnType.NONE|as.MapReturnType.INVERTED, keptRankExp, put)
	return []*as.Operation{as.AddOp(as.NewBin(FenceBin, 1)), as.ExpWriteOp(AcqsBin, kept, as.ExpWriteFlagDefault), as.GetBinOp(FenceBin)}
}

// acqIs is true on a lock record of acquisition acq.
func acqIs(acq int64) *as.Expression {
	return as.ExpEq(as.ExpIntBin(AcqBin), as.ExpIntVal(acq))
}

// Lease bins and expressions. A dcsync lock record carries its lease length in ms
// (LeaseBin); the lease lapses when the server's since_update() (ms since the record's
// last write) reaches it, so leases end on time although record TTLs are whole seconds.
// The record's own TTL is the lease rounded up to seconds plus one: it only removes
// abandoned records, and keeps a Java client out until then.
//
// A Java lock has no owner, lease or identity bin. On the server (checked on 8.1 by
// TestServerSemantics and TestJavaLayoutLockInterop), a comparison over a missing bin is
// "unknown", which filters the record out (FILTERED_OUT), also under a not; and and or
// evaluate left to right and stop at the first operand that decides. So lapsed() is
// false for a Java lock (its first operand is), alive() true, and every owner check
// (heldBy, releasable) and abandon's acquisition check (acqIs) filter a Java lock out:
// LockLost, the Java lock untouched.
func lapsed() *as.Expression { return lapsedExp }

// alive is true for a Java lock (no lease bin) and for a dcsync lock whose lease runs.
func alive() *as.Expression { return aliveExp }

// The constant expressions of the lock operations, packed once (prepack).
var (
	lapsedExp = prepack(as.ExpAnd(as.ExpBinExists(LeaseBin), as.ExpGreaterEq(as.ExpSinceUpdate(), as.ExpIntBin(LeaseBin))))
	aliveExp  = prepack(as.ExpOr(as.ExpNot(as.ExpBinExists(LeaseBin)), as.ExpLess(as.ExpSinceUpdate(), as.ExpIntBin(LeaseBin))))
	// releasableExp is releasable without its owner check.
	releasableExp = prepack(as.ExpAnd(as.ExpBinExists(LeaseBin),
		as.ExpLess(as.ExpNumAdd(as.ExpSinceUpdate(), as.ExpIntVal(releaseGrace)), as.ExpIntBin(LeaseBin))))
	hasAcqsExp  = prepack(as.ExpBinExists(AcqsBin))
	acqsMapExp  = prepack(as.ExpMapBin(AcqsBin))
	acqsOrEmpty = prepack(as.ExpCond(as.ExpBinExists(AcqsBin), as.ExpMapBin(AcqsBin), as.ExpMapVal(map[any]any{})))
	fenceIntExp = prepack(as.ExpIntBin(FenceBin))
	keptRankExp = prepack(as.ExpIntVal(-FencesKept))
	ownerBinExp = prepack(as.ExpStringBin(OwnerBin))
)

func heldBy(owner string) *as.Expression { return as.ExpAnd(ownerIs(owner), alive()) }

// releaseGrace is how much of a lease must be left for ReleaseLock to count as a
// release. Leases are kept in whole ms and restart at the acquisition's last write, so
// the server's lease ends up to about a millisecond after the deadline the holder
// computed from its own clock; a release in that sliver reports LockLost (the holder's
// lease is over by its own reckoning) and leaves the record to lapse within the grace.
const releaseGrace = 5 // ms

// releasable is true while owner holds the lock with more than releaseGrace left.
func releasable(owner string) *as.Expression { return as.ExpAnd(ownerIs(owner), releasableExp) }

func lockTTL(ttl time.Duration) uint32 { return ttlSeconds(ttl) + 1 }

// AcquireLock takes the lock in two round trips (ReleaseLock is a third):
//
//  1. Take the lock record as the Java lock manager does, with a put of the Java bins
//     (plus owner, lease, identity and a fresh random acquisition id, AcqBin) that
//     expects generation 0 (GENERATION_ERROR: held). When the record exists but its
//     dcsync lease has lapsed, a put that replaces the record on that condition takes
//     it over. Only when both fail is the record read (with the fence record, in one
//     batch): held by someone else, or ours (an in-doubt try landed: the record's
//     acquisition id is ours).
//  2. As the holder, take the next fencing token: one operate on the never-expiring
//     fence record adds 1 to its counter and enters the new number under the
//     acquisition id, on condition that the id has no number yet (unnumbered). A try
//     filtered out by that condition reads the number an earlier try got. The lock
//     record is not written again: readers find the token in the fence record.
//
// Tokens strictly increase: the increment is sent only after the take succeeded, so it
// lands after the take, which comes after every earlier holder's lease ended (released
// or lapsed), and so after every earlier holder's increment, since a holder reports
// the lock acquired only if its increment's reply came back within its lease (the
// server's lease starts at the put, after start, and ends no earlier than start+ttl).
// An acquisition whose increment came back later reports LockUnavailable and deletes
// its record if it is still its own. Sending the increment before the take, or in one
// batch with it (whose parts are not ordered), would let a contender's increment land
// before an earlier holder's: TestLockLateFenceIncrement and TestLockFenceAfterLapse
// fail then.
//
// When someone else holds the lock it returns their state and LockUnavailable.
func (s *Store) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	const op = "aerospike.AcquireLock"
	if err := s.checkLease(k, owner, ttl); err != nil {
		return driver.LockState{}, err
	}
	key, fence, err := s.lockKeys(k)
	if err != nil {
		return driver.LockState{}, err
	}
	acq := mrand.Int64()
	bins := []*as.Bin{
		as.NewBin(layout.AerospikeLockDataBin(k.Farm), 1),
		as.NewBin(layout.AerospikeLockUATBin(k.Farm), time.Now().UnixMilli()),
		as.NewBin(OwnerBin, owner),
		as.NewBin(LeaseBin, ceilMS(ttl)),
		as.NewBin(IdentityBin, layout.IdentityKey(k)),
		as.NewBin(AcqBin, acq),
	}

	// 1. Take the lock record.
	start := time.Now()
	var held *driver.LockState
	var holderID string // the holder's identity, "" for a Java lock
	err = s.retry(ctx, op, true, func(a *attempt) error {
		wp := s.writePolicy(ctx, lockTTL(ttl))
		wp.GenerationPolicy, wp.Generation = as.EXPECT_GEN_EQUAL, 0
		err := s.client.PutBins(wp, key, bins...)
		if !hasCode(err, types.GENERATION_ERROR) {
			return err
		}
		// Held, or a lapsed lease: take that over, replacing every bin.
		wp = s.writePolicy(ctx, lockTTL(ttl))
		wp.RecordExistsAction = as.REPLACE
		wp.FilterExpression = lapsed()
		err = s.client.PutBins(wp, key, bins...)
		if !hasCode(err, types.FILTERED_OUT) {
			return err
		}
		recs := s.lockReads(key, fence, nil)
		if err := s.client.BatchOperate(s.batchPolicy(ctx), recs); err != nil && recs[0].BatchRec().ResultCode == types.NO_RESPONSE {
			return err
		}
		lr := recs[0].BatchRec()
		switch {
		case lr.ResultCode == types.KEY_NOT_FOUND_ERROR:
			// Released or expired between the put and the read: try again.
			if a.n < s.cfg.Attempts {
				return errTryAgain
			}
			held = &driver.LockState{}
			return nil
		case lr.ResultCode != types.OK:
			return batchErr(lr)
		}
		if got, ok := intOf(lr.Record.Bins[AcqBin]); ok && got == acq {
			return nil // an in-doubt try of ours landed
		}
		st := lockState(lr.Record, fenceBins(recs[1]), time.Now())
		held = &st
		holderID = stringOf(lr.Record.Bins[IdentityBin])
		return nil
	})
	if err != nil {
		return driver.LockState{}, err
	}
	if held != nil {
		if other, ok := layout.ParseIdentityKey(holderID); ok && holderID != layout.IdentityKey(k) {
			return *held, driver.Errorf(dcsync.LockUnavailable, op,
				"lock %s is held by the lock of client %q, name %q, which has the same Aerospike key %q (the Java layout joins ids with '#' unescaped)",
				k, other.Client, other.Name, layout.AerospikeLockKey(k.Client, k.Name))
		}
		return *held, driver.Errorf(dcsync.LockUnavailable, op, "lock %s is held", k)
	}

	// 2. As the holder, number the acquisition.
	var token int64
	err = s.retry(ctx, op, true, func(*attempt) error {
		wp := s.writePolicy(ctx, as.TTLDontExpire)
		wp.FilterExpression = unnumbered(acq)
		rec, err := s.client.Operate(wp, fence, numberOps(acq)...)
		switch {
		case hasCode(err, types.FILTERED_OUT):
			// An earlier try landed: read the number it got.
			rec, err = s.client.Operate(s.writePolicy(ctx, 0), fence, as.GetBinOp(AcqsBin))
			if err != nil {
				return err
			}
			n, ok := acqNumber(rec.Bins, acq)
			if !ok {
				return driver.Errorf(dcsync.Internal, op, "fence record of %s has no number for this acquisition, yet refused to give one: %v", k, rec.Bins)
			}
			token = n
			return nil
		case err != nil:
			return err
		}
		n, ok := intOf(rec.Bins[FenceBin])
		if !ok || n <= 0 {
			return driver.Errorf(dcsync.Internal, op, "fence record of %s holds %v", k, rec.Bins[FenceBin])
		}
		token = n
		return nil
	})
	if err != nil {
		s.abandon(key, acq)
		return driver.LockState{}, err
	}
	if time.Since(start) >= ttl {
		// The lease may have lapsed before the number was taken: a later holder may
		// hold a smaller one.
		s.abandon(key, acq)
		return driver.LockState{}, driver.Errorf(dcsync.LockUnavailable, op,
			"lock %s: its lease of %v ran out while it was being acquired", k, ttl)
	}
	return driver.LockState{Owner: owner, Token: uint64(token), Expires: start.Add(ttl)}, nil
}

// lockReads are the batch reads of a lock record (lockReadOps, filtered by filter when
// not nil) and of its fence record (fenceReadOps).
func (s *Store) lockReads(key, fence *as.Key, filter *as.Expression) []as.BatchRecordIfc {
	var p *as.BatchReadPolicy
	if filter != nil {
		p = as.NewBatchReadPolicy()
		p.FilterExpression = filter
	}
	return []as.BatchRecordIfc{as.NewBatchReadOps(p, key, lockReadOps()...), as.NewBatchReadOps(nil, fence, fenceReadOps()...)}
}

// fenceBins returns the bins a fence read found (nil when the record does not exist).
func fenceBins(r as.BatchRecordIfc) as.BinMap {
	if br := r.BatchRec(); br.ResultCode == types.OK && br.Record != nil {
		return br.Record.Bins
	}
	return nil
}

// batchErr is the error of a batch record that failed.
func batchErr(br *as.BatchRecord) error {
	if br.Err != nil {
		return br.Err
	}
	return &as.AerospikeError{ResultCode: br.ResultCode}
}

// abandon deletes a lock record that acquisition acq took but could not finish
// acquiring. Best effort: when it fails the lease runs out.
func (s *Store) abandon(key *as.Key, acq int64) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	wp := s.writePolicy(ctx, 0)
	wp.FilterExpression = acqIs(acq)
	wp.DurableDelete = s.cfg.DurableDelete
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return
	}
	if _, err := s.client.Delete(wp, key); err != nil && !hasCode(err, types.FILTERED_OUT) {
		s.log.Warn("aerospike: could not delete a half-acquired lock; its lease will lapse", "err", err)
	}
}

// RefreshLock extends owner's lease to ttl from now with a write of the lease bin that
// only applies when the record exists, its owner bin is owner, its lease has not lapsed
// (otherwise LockLost, nothing changed) and less than ttl of it is left: a refresh
// never moves the lease's end earlier. So a try that lands late, after later refreshes,
// either moves the end later (still the holder's, never reused: the holder's deadline
// holds) or is filtered out; it can never end the lease before the deadline a later
// refresh reported (TestLockLateRefresh). A refresh filtered because more than ttl is
// left reports success without writing (the lease already ends after now+ttl). The
// write and a read of the fence record (for the token) go in one batch: one round trip.
func (s *Store) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	res, err := s.refreshLocks(ctx, "aerospike.RefreshLock", []driver.LockRefresh{{Key: k, Owner: owner, TTL: ttl}}, true)
	if err != nil {
		return driver.LockState{}, err
	}
	return res[0].State, res[0].Err
}

// ReleaseLock deletes the lock record if its owner bin is owner and the lease has more
// than a few ms (releaseGrace) left, and returns LockLost otherwise, leaving another
// holder's lock untouched (a lapsing record of owner's is left to expire or be taken
// over). When a try was in doubt and the
// retry finds no record, the lock counts as released: it was ours when we sent it.
func (s *Store) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	const op = "aerospike.ReleaseLock"
	if err := s.checkLock(k, owner); err != nil {
		return err
	}
	key, err := s.lockKey(k)
	if err != nil {
		return err
	}
	lost := false
	err = s.retry(ctx, op, true, func(a *attempt) error {
		wp := s.writePolicy(ctx, 0)
		wp.FilterExpression = releasable(owner)
		wp.DurableDelete = s.cfg.DurableDelete
		existed, err := s.client.Delete(wp, key)
		switch {
		case hasCode(err, types.FILTERED_OUT):
			lost = true
			return nil
		case err != nil:
			return err
		}
		lost = !existed && !a.inDoubt
		return nil
	})
	if err != nil {
		return err
	}
	if lost {
		return driver.Errorf(dcsync.LockLost, op, "%s does not hold lock %s", owner, k)
	}
	return nil
}

// InspectLock reads the lock record and its fence record in one batch: the holder's
// owner and token (empty and 0 for a lock a Java client holds; token 0 when unknown: the
// acquisition has no number yet, or its number is not the fence's latest, see
// lockState) and when its lease ends. NotFound when the
// lock is free: no record, or a dcsync lease that has lapsed.
func (s *Store) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	res, err := s.inspectLocks(ctx, "aerospike.InspectLock", []dcsync.Key{k})
	if err != nil {
		return driver.LockState{}, err
	}
	return res[0].State, res[0].Err
}
