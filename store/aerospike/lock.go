package aerospike

import (
	"context"
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

// lockReadOps read what lockState needs: owner, token, and the lease left, computed by
// the server (lease - since_update) so that it is exact to the ms.
func lockReadOps() []*as.Operation {
	return []*as.Operation{
		as.GetBinOp(OwnerBin), as.GetBinOp(TokenBin), as.GetBinOp(IdentityBin),
		as.ExpReadOp(rLeft, as.ExpCond(as.ExpBinExists(LeaseBin), as.ExpNumSub(as.ExpIntBin(LeaseBin), as.ExpSinceUpdate()),
			as.ExpIntVal(-1)), as.ExpReadFlagDefault),
	}
}

// lockState reads a lock record's state from the reply of lockReadOps; Owner is "" and
// Token 0 for a Java lock, whose lease ends with the record (its TTL, whole seconds).
func lockState(rec *as.Record, now time.Time) driver.LockState {
	st := driver.LockState{Owner: stringOf(rec.Bins[OwnerBin])}
	if left, ok := intOf(rec.Bins[rLeft]); ok && left >= 0 {
		st.Expires = now.Add(time.Duration(left) * time.Millisecond)
	} else {
		st.Expires = expires(now, rec.Expiration)
	}
	if t, ok := intOf(rec.Bins[TokenBin]); ok && t > 0 {
		st.Token = uint64(t)
	}
	return st
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
// (heldBy, releasable, abandon's ownerIs) filters a Java lock out: LockLost, the Java
// lock untouched.
func lapsed() *as.Expression {
	return as.ExpAnd(as.ExpBinExists(LeaseBin), as.ExpGreaterEq(as.ExpSinceUpdate(), as.ExpIntBin(LeaseBin)))
}

// alive is true for a Java lock (no lease bin) and for a dcsync lock whose lease runs.
func alive() *as.Expression {
	return as.ExpOr(as.ExpNot(as.ExpBinExists(LeaseBin)), as.ExpLess(as.ExpSinceUpdate(), as.ExpIntBin(LeaseBin)))
}

func heldBy(owner string) *as.Expression { return as.ExpAnd(ownerIs(owner), alive()) }

// releaseGrace is how much of a lease must be left for ReleaseLock to count as a
// release. Leases are kept in whole ms and restart at the acquisition's last write, so
// the server's lease ends up to about a millisecond after the deadline the holder
// computed from its own clock; a release in that sliver reports LockLost (the holder's
// lease is over by its own reckoning) and leaves the record to lapse within the grace.
const releaseGrace = 5 // ms

// releasable is true while owner holds the lock with more than releaseGrace left.
func releasable(owner string) *as.Expression {
	return as.ExpAnd(ownerIs(owner), as.ExpBinExists(LeaseBin),
		as.ExpLess(as.ExpNumAdd(as.ExpSinceUpdate(), as.ExpIntVal(releaseGrace)), as.ExpIntBin(LeaseBin)))
}

func lockTTL(ttl time.Duration) uint32 { return ttlSeconds(ttl) + 1 }

// AcquireLock takes the lock as the Java lock manager does, with a put of the Java bins
// (plus owner and lease) that expects generation 0 (GENERATION_ERROR: held). When the
// record exists but its dcsync lease has lapsed, a put that replaces the record on that
// condition takes it over. As holder it then takes the next fencing token from the
// never-expiring fence record and writes it into the lock record, on condition that it
// still holds it. When a try was in doubt, the record's owner bin says whether the lock
// is ours. When someone else holds the lock it returns their state and LockUnavailable.
func (s *Store) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	const op = "aerospike.AcquireLock"
	if err := s.checkLease(k, owner, ttl); err != nil {
		return driver.LockState{}, err
	}
	key, fence, err := s.lockKeys(k)
	if err != nil {
		return driver.LockState{}, err
	}
	bins := as.BinMap{
		layout.AerospikeLockDataBin(k.Farm): 1,
		layout.AerospikeLockUATBin(k.Farm):  time.Now().UnixMilli(),
		OwnerBin:                            owner,
		LeaseBin:                            ceilMS(ttl),
		IdentityBin:                         layout.IdentityKey(k),
	}

	// 1. Take the lock record.
	start := time.Now()
	var held *driver.LockState
	var holderID string // the holder's identity, "" for a Java lock
	err = s.retry(ctx, op, true, func(a *attempt) error {
		wp := s.writePolicy(ctx, lockTTL(ttl))
		wp.GenerationPolicy, wp.Generation = as.EXPECT_GEN_EQUAL, 0
		err := s.client.Put(wp, key, bins)
		if !hasCode(err, types.GENERATION_ERROR) {
			return err
		}
		// Held, or a lapsed lease: take that over, replacing every bin.
		wp = s.writePolicy(ctx, lockTTL(ttl))
		wp.RecordExistsAction = as.REPLACE
		wp.FilterExpression = lapsed()
		err = s.client.Put(wp, key, bins)
		if !hasCode(err, types.FILTERED_OUT) {
			return err
		}
		rec, err := s.client.Operate(s.writePolicy(ctx, 0), key, lockReadOps()...)
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR):
			// Released or expired between the put and the read: try again.
			if a.n < s.cfg.Attempts {
				return errTryAgain
			}
			held = &driver.LockState{}
			return nil
		case err != nil:
			return err
		}
		st := lockState(rec, time.Now())
		if st.Owner != owner {
			held = &st
			holderID = stringOf(rec.Bins[IdentityBin])
		}
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

	// 2. As the holder, take the next fencing token. A retry after an in-doubt try may
	// skip a number; tokens still increase.
	var token int64
	err = s.retry(ctx, op, true, func(*attempt) error {
		wp := s.writePolicy(ctx, as.TTLDontExpire)
		rec, err := s.client.Operate(wp, fence, as.AddOp(as.NewBin(FenceBin, 1)), as.GetBinOp(FenceBin))
		if err != nil {
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
		s.abandon(key, owner)
		return driver.LockState{}, err
	}

	// 3. Write the token into the lock record if we still hold it and it has no token
	// yet. A write restarts the lease, so this one shortens it by the time spent since
	// the first try of step 1: the lease then ends no earlier than start+ttl (our
	// caller's view) and no later than that plus this write's one-way latency. The
	// condition "no token yet" is the exact state this write replaces: a try that lands
	// late, after a retry wrote the token and the holder refreshed its lease, would
	// otherwise set the lease back to the shorter one it carries, ending it before the
	// holder's deadline (TestLockLateTokenWrite). A filtered retry reads the record: our
	// owner with our token means an earlier try landed.
	var st driver.LockState
	lost := false
	err = s.retry(ctx, op, true, func(*attempt) error {
		left := ttl - time.Since(start)
		if left <= 0 {
			lost = true
			return nil
		}
		wp := s.writePolicy(ctx, lockTTL(left))
		wp.RecordExistsAction = as.UPDATE_ONLY
		wp.FilterExpression = as.ExpAnd(heldBy(owner), as.ExpNot(as.ExpBinExists(TokenBin)))
		_, err := s.client.Operate(wp, key, as.PutOp(as.NewBin(TokenBin, token)),
			as.PutOp(as.NewBin(LeaseBin, ceilMS(left))))
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR):
			lost = true
			return nil
		case hasCode(err, types.FILTERED_OUT):
			rp := s.writePolicy(ctx, 0)
			rp.FilterExpression = heldBy(owner)
			rec, err := s.client.Operate(rp, key, lockReadOps()...)
			switch {
			case hasCode(err, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT):
				lost = true
				return nil
			case err != nil:
				return err
			}
			if t, _ := intOf(rec.Bins[TokenBin]); t != token {
				lost = true
				return nil
			}
		case err != nil:
			return err
		}
		st = driver.LockState{Owner: owner, Token: uint64(token), Expires: start.Add(ttl)}
		return nil
	})
	if err != nil {
		s.abandon(key, owner)
		return driver.LockState{}, err
	}
	if lost {
		return driver.LockState{}, driver.Errorf(dcsync.LockUnavailable, op,
			"lock %s lapsed or was taken over while it was being acquired", k)
	}
	return st, nil
}

// abandon deletes a lock record that owner took but could not finish acquiring. Best
// effort: when it fails the lease runs out.
func (s *Store) abandon(key *as.Key, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	wp := s.writePolicy(ctx, 0)
	wp.FilterExpression = ownerIs(owner)
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
// left reports success without writing (the lease already ends after now+ttl).
func (s *Store) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	const op = "aerospike.RefreshLock"
	if err := s.checkLease(k, owner, ttl); err != nil {
		return driver.LockState{}, err
	}
	key, _, err := s.lockKeys(k)
	if err != nil {
		return driver.LockState{}, err
	}
	var st driver.LockState
	lost := false
	err = s.retry(ctx, op, true, func(*attempt) error {
		sent := time.Now()
		wp := s.writePolicy(ctx, lockTTL(ttl))
		wp.RecordExistsAction = as.UPDATE_ONLY
		wp.FilterExpression = as.ExpAnd(heldBy(owner),
			as.ExpLess(as.ExpNumSub(as.ExpIntBin(LeaseBin), as.ExpSinceUpdate()), as.ExpIntVal(ceilMS(ttl))))
		rec, err := s.client.Operate(wp, key, as.PutOp(as.NewBin(LeaseBin, ceilMS(ttl))), as.GetBinOp(TokenBin))
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR):
			lost = true
			return nil
		case hasCode(err, types.FILTERED_OUT):
			// Not ours, lapsed, or more than ttl left: read which.
			rp := s.writePolicy(ctx, 0)
			rp.FilterExpression = heldBy(owner)
			rec, err = s.client.Operate(rp, key, lockReadOps()...)
			switch {
			case hasCode(err, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT):
				lost = true
				return nil
			case err != nil:
				return err
			}
			if left, ok := intOf(rec.Bins[rLeft]); !ok || left < ceilMS(ttl) {
				return errTryAgain // less than ttl left by now: write it
			}
		case err != nil:
			return err
		}
		st = lockState(rec, time.Now())
		st.Owner, st.Expires = owner, sent.Add(ttl)
		return nil
	})
	if err != nil {
		return driver.LockState{}, err
	}
	if lost {
		return driver.LockState{}, driver.Errorf(dcsync.LockLost, op, "%s does not hold lock %s", owner, k)
	}
	return st, nil
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
	key, _, err := s.lockKeys(k)
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

// InspectLock reads the lock record: the holder's owner and token (empty and 0 for a
// lock a Java client holds) and when its lease ends. NotFound when the lock is free:
// no record, or a dcsync lease that has lapsed.
func (s *Store) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	const op = "aerospike.InspectLock"
	if err := driver.ValidateKey("lock", k); err != nil {
		return driver.LockState{}, err
	}
	if err := s.checkKey(k); err != nil {
		return driver.LockState{}, err
	}
	key, _, err := s.lockKeys(k)
	if err != nil {
		return driver.LockState{}, err
	}
	var st driver.LockState
	found := false
	err = s.retry(ctx, op, false, func(*attempt) error {
		wp := s.writePolicy(ctx, 0)
		wp.FilterExpression = alive()
		rec, err := s.client.Operate(wp, key, lockReadOps()...)
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT):
			found = false
			return nil
		case err != nil:
			return err
		}
		st, found = lockState(rec, time.Now()), true
		return nil
	})
	if err != nil {
		return driver.LockState{}, err
	}
	if !found {
		return driver.LockState{}, driver.Errorf(dcsync.NotFound, op, "lock %s is free", k)
	}
	return st, nil
}
