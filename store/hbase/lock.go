package hbase

import (
	"bytes"
	"context"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// lockRow is a lock row as read.
type lockRow struct {
	held    bool   // D:L exists
	owner   string // D:O, "" for a Java-held lock
	token   uint64 // D:T, 0 when absent
	expires time.Time
}

func (r lockRow) state() dcsync.LockState {
	return dcsync.LockState{Owner: r.owner, Token: r.token, Expires: r.expires}
}

// fenceRow returns the row of k's fencing counter: Salt("F#" + logical lock key).
func fenceRow(k dcsync.Key) []byte {
	logical := string(layout.HBaseLockRow(k)[1:])
	return layout.Salt(FencePrefix + logical)
}

func (s *Store) readLock(ctx context.Context, row []byte) (lockRow, error) {
	cells, err := s.db.Get(ctx, s.lockTable, row, hbaserpc.Column{Family: famLock})
	if err != nil {
		return lockRow{}, err
	}
	var r lockRow
	for _, c := range cells {
		switch {
		case bytes.Equal(c.Qualifier, qualLock):
			r.held = len(c.Value) > 0 // HBase's if-absent treats an empty value as absent
		case bytes.Equal(c.Qualifier, qualOwner):
			r.owner = string(c.Value)
		case bytes.Equal(c.Qualifier, qualToken):
			if len(c.Value) == 8 {
				r.token = uint64(int64FromBE(c.Value))
			}
		case bytes.Equal(c.Qualifier, qualExpiry):
			if len(c.Value) == 8 {
				r.expires = time.UnixMilli(int64FromBE(c.Value))
			}
		}
	}
	if !r.held {
		return lockRow{}, nil
	}
	return r, nil
}

func int64FromBE(b []byte) int64 { v, _ := hbaserpc.Int64(b); return v }

// lockPut writes the lock cells, all with the lease as their TTL; token 0 is left out.
func lockPut(owner string, expires time.Time, token uint64, ttl time.Duration) *hbaserpc.Put {
	vals := []hbaserpc.Value{
		{Family: famLock, Qualifier: qualLock, Value: lockMarker},
		{Family: famLock, Qualifier: qualOwner, Value: []byte(owner)},
		{Family: famLock, Qualifier: qualExpiry, Value: be64(uint64(expires.UnixMilli()))},
	}
	if token != 0 {
		vals = append(vals, hbaserpc.Value{Family: famLock, Qualifier: qualToken, Value: be64(token)})
	}
	return &hbaserpc.Put{Values: vals, TTL: ttl}
}

func holder(r lockRow) string {
	if r.owner == "" {
		return "a Java client"
	}
	return "owner " + r.owner
}

func unavailable(op string, k dcsync.Key, r lockRow) error {
	return dcsync.Errorf(dcsync.LockUnavailable, op, "%s is held by %s", k, holder(r))
}

func lost(op string, k dcsync.Key, owner string) error {
	return dcsync.Errorf(dcsync.LockLost, op, "%s is not held by owner %s", k, owner)
}

// AcquireLock takes the lock at k for owner with a lease of ttl, in three steps:
//
//  1. check-and-mutate "D:L absent": put L, O, E with the lease as cell TTL (the Java
//     acquire, plus dcsync's cells). Not applied: the holder's state and LockUnavailable
//     (Owner "" and Token 0 for a Java holder).
//  2. Increment the fencing counter (nonce'd, so a retried Increment counts once): the
//     token.
//  3. check-and-mutate "D:O == owner": put T, with what is left of the lease as its
//     TTL (the lease is not extended: it runs from before step 1). Not applied: the
//     lease lapsed during steps 1-2 and someone else may hold the lock:
//     LockUnavailable, never success.
//
// When the outcome of step 1 or 3 is unknown, the row is read back: our owner id in D:O
// means the step took effect; an absent lock means it did not, and the acquire starts
// over (at most a few times); another holder means LockUnavailable. A release in the
// same millisecond as step 1 can hide step 1's cells behind its delete marker; that is
// seen in step 3 and the acquire starts over too. When ctx ends during step 1, see
// abandon.
func (s *Store) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (dcsync.LockState, error) {
	const op = "hbase.AcquireLock"
	if err := dcsync.CheckLease(k, owner, ttl); err != nil {
		return dcsync.LockState{}, err
	}
	if err := s.check(op); err != nil {
		return dcsync.LockState{}, err
	}
	row := layout.HBaseLockRow(k)
	var last error
	for try := 0; try < maxTries; try++ {
		if try > 1 {
			// The first retry goes at once: its usual cause, a delete marker of the same
			// millisecond, is already in the past.
			if err := sleepCtx(ctx, time.Duration(try-1)*time.Millisecond); err != nil {
				return dcsync.LockState{}, ctxErr(ctx, op)
			}
		}
		// Step 1. The lease runs from before it is sent: every cell written in this
		// acquire expires by then (plus the write's own latency), not later.
		start := time.Now()
		expires := start.Add(ttl)
		applied, err := s.casTake(ctx, row, owner, expires, ttl)
		if err != nil {
			return s.abandon(ctx, op, k, row, owner, err)
		}
		if !applied {
			r, err := s.readLock(ctx, row)
			if err != nil {
				return s.abandon(ctx, op, k, row, owner, err)
			}
			if r.held {
				return r.state(), unavailable(op, k, r)
			}
			last = dcsync.Errorf(dcsync.LockUnavailable, op, "%s: freed and taken again while acquiring", k)
			continue // freed meanwhile: try again
		}
		// Step 2.
		token, err := s.bumpFence(ctx, k)
		if err != nil {
			s.releaseQuiet(row, owner)
			return dcsync.LockState{}, wrap(err, op)
		}
		// Step 3: the token, with what is left of the lease as its TTL.
		left := ttl - time.Since(start)
		ok := false
		if left >= time.Millisecond {
			ok, err = s.casRecord(ctx, row, owner, token, left)
			if err != nil {
				s.releaseQuiet(row, owner)
				return dcsync.LockState{}, wrap(err, op)
			}
		}
		if ok {
			return dcsync.LockState{Owner: owner, Token: token, Expires: expires}, nil
		}
		// Our step-1 cells are gone: the lease lapsed (and someone else may hold the
		// lock now), or a row delete of the same millisecond masked them. Start over;
		// step 1 tells which.
		s.log.Debug("hbase: acquired cells vanished; retrying", "key", k.String(), "try", try)
		last = dcsync.Errorf(dcsync.LockUnavailable, op, "%s: lease lapsed while acquiring", k)
	}
	return dcsync.LockState{}, last
}

// abandon ends an acquire whose step 1 failed with err. When ctx has ended, the outcome
// may still be unknown, so the row is read back on a short deadline of its own: a lock
// this acquire took after all is released at once (rather than blocking everyone for
// the lease), and a lock someone else holds is reported as LockUnavailable, wrapping
// ctx's error.
func (s *Store) abandon(ctx context.Context, op string, k dcsync.Key, row []byte, owner string, err error) (dcsync.LockState, error) {
	cerr := ctx.Err()
	if cerr == nil {
		return dcsync.LockState{}, wrap(err, op)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	r, rerr := s.readLock(rctx, row)
	switch {
	case rerr != nil:
	case r.held && r.owner == owner:
		s.releaseQuiet(row, owner)
	case r.held:
		return r.state(), &dcsync.Error{Code: dcsync.LockUnavailable, Op: op,
			Msg: k.String() + " is held by " + holder(r) + "; gave up", Err: cerr}
	}
	return dcsync.LockState{}, wrap(err, op)
}

// casTake is step 1 of AcquireLock; it resolves an unknown outcome by reading back and
// reports whether owner now holds the lock.
func (s *Store) casTake(ctx context.Context, row []byte, owner string, expires time.Time, ttl time.Duration) (bool, error) {
	for try := 0; ; try++ {
		ok, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, hbaserpc.IfAbsent(famLock, qualLock),
			lockPut(owner, expires, 0, ttl))
		if err == nil {
			return ok, nil
		}
		if !inDoubt(err) || try >= maxTries-1 {
			return false, err
		}
		r, rerr := s.readLock(ctx, row)
		if rerr != nil {
			return false, err
		}
		s.log.Debug("hbase: acquire outcome unknown; read back", "row", row, "held", r.held, "mine", r.owner == owner)
		switch {
		case r.held && r.owner == owner:
			return true, nil
		case r.held:
			return false, nil
		}
		// Absent: not applied (or already lapsed); send it again.
	}
}

// casRecord is step 3 of AcquireLock: it puts the token with ttl (what is left of the
// lease) if owner still holds the lock, and resolves an unknown outcome by reading back.
func (s *Store) casRecord(ctx context.Context, row []byte, owner string, token uint64, ttl time.Duration) (bool, error) {
	put := &hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualToken, Value: be64(token)}}, TTL: ttl}
	for try := 0; ; try++ {
		ok, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, hbaserpc.IfEquals(famLock, qualOwner, []byte(owner)), put)
		if err == nil {
			return ok, nil
		}
		if !inDoubt(err) || try >= maxTries-1 {
			return false, err
		}
		r, rerr := s.readLock(ctx, row)
		if rerr != nil {
			return false, err
		}
		s.log.Debug("hbase: token record outcome unknown; read back", "row", row, "held", r.held, "token", r.token)
		switch {
		case !r.held || r.owner != owner:
			return false, nil
		case r.token == token:
			return true, nil
		}
		// Still ours without the token: not applied; send it again.
	}
}

// bumpFence increments k's fencing counter and returns its new value.
func (s *Store) bumpFence(ctx context.Context, k dcsync.Key) (uint64, error) {
	const op = "hbase.AcquireLock"
	cells, err := s.db.Increment(ctx, s.lockTable, &hbaserpc.Increment{
		Row:    fenceRow(k),
		Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: 1}},
	})
	if err != nil {
		return 0, err
	}
	for _, c := range cells {
		if bytes.Equal(c.Qualifier, qualFence) {
			v, err := decode64(op, c)
			if err != nil {
				return 0, err
			}
			if v <= 0 {
				return 0, dcsync.Errorf(dcsync.Internal, op, "fencing counter of %s is %d", k, v)
			}
			return uint64(v), nil
		}
	}
	return 0, dcsync.Errorf(dcsync.Internal, op, "Increment of the fencing counter of %s returned no value", k)
}

// releaseQuiet releases a half-taken lock after a failure, best effort, on its own short
// deadline (the caller's ctx may be what failed).
func (s *Store) releaseQuiet(row []byte, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, hbaserpc.IfEquals(famLock, qualOwner, []byte(owner)),
		&hbaserpc.Delete{}); err != nil {
		s.log.Debug("hbase: releasing a half-taken lock failed; it lapses with its lease", "row", row, "err", err)
	}
}

// RefreshLock extends owner's lease to ttl from now: it reads the row (LockLost unless
// owner holds it and its recorded expiry D:E has not passed), then check-and-mutates "D:O == owner" to put L, O, E and T again with
// the new TTL (LockLost when not applied). An unknown outcome is resolved by reading
// back D:O and D:E: our owner with the new expiry means refreshed, our owner with the
// old one means not applied (sent again), another or no owner means LockLost.
func (s *Store) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (dcsync.LockState, error) {
	const op = "hbase.RefreshLock"
	if err := dcsync.CheckLease(k, owner, ttl); err != nil {
		return dcsync.LockState{}, err
	}
	if err := s.check(op); err != nil {
		return dcsync.LockState{}, err
	}
	row := layout.HBaseLockRow(k)
	r, err := s.readLock(ctx, row)
	if err != nil {
		return dcsync.LockState{}, wrap(err, op)
	}
	if !r.held || r.owner != owner || !r.expires.IsZero() && !time.Now().Before(r.expires) {
		return dcsync.LockState{}, lost(op, k, owner)
	}
	for try := 0; ; try++ {
		expires := time.Now().Add(ttl)
		ok, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, hbaserpc.IfEquals(famLock, qualOwner, []byte(owner)),
			lockPut(owner, expires, r.token, ttl))
		if err == nil {
			if !ok {
				return dcsync.LockState{}, lost(op, k, owner)
			}
			return dcsync.LockState{Owner: owner, Token: r.token, Expires: expires}, nil
		}
		if !inDoubt(err) || try >= maxTries-1 {
			return dcsync.LockState{}, wrap(err, op)
		}
		back, rerr := s.readLock(ctx, row)
		if rerr != nil {
			return dcsync.LockState{}, wrap(err, op)
		}
		s.log.Debug("hbase: refresh outcome unknown; read back", "key", k.String(), "held", back.held, "mine", back.owner == owner)
		switch {
		case !back.held || back.owner != owner:
			return dcsync.LockState{}, lost(op, k, owner)
		case back.expires.UnixMilli() == expires.UnixMilli():
			return back.state(), nil
		}
	}
}

// ReleaseLock frees the lock if owner holds it: it reads the row (LockLost unless owner
// holds it), then check-and-mutates "D:O == owner" to delete the lock row (the fencing
// counter lives in another row). Not applied: LockLost. A lease already past its
// recorded expiry (D:E) is deleted too but reported as LockLost. An unknown outcome is
// resolved by reading back D:O: no longer ours means released; still ours means not
// applied (sent again).
func (s *Store) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	const op = "hbase.ReleaseLock"
	if err := dcsync.CheckLock(k, owner, 0); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	row := layout.HBaseLockRow(k)
	r, err := s.readLock(ctx, row)
	if err != nil {
		return wrap(err, op)
	}
	if !r.held || r.owner != owner {
		return lost(op, k, owner)
	}
	// A lease past its recorded expiry is lost, though HBase may keep its cells for the
	// moment its write took to arrive; free it all the same.
	expired := !r.expires.IsZero() && !time.Now().Before(r.expires)
	for try := 0; ; try++ {
		ok, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, hbaserpc.IfEquals(famLock, qualOwner, []byte(owner)),
			&hbaserpc.Delete{})
		if err == nil {
			if !ok || expired {
				return lost(op, k, owner)
			}
			return nil
		}
		if !inDoubt(err) || try >= maxTries-1 {
			return wrap(err, op)
		}
		back, rerr := s.readLock(ctx, row)
		if rerr != nil {
			return wrap(err, op)
		}
		s.log.Debug("hbase: release outcome unknown; read back", "key", k.String(), "held", back.held, "mine", back.owner == owner)
		if !back.held || back.owner != owner {
			if expired {
				return lost(op, k, owner)
			}
			return nil
		}
	}
}

// InspectLock returns the holder's state, or NotFound when D:L is absent. For a lock a
// Java client holds, Owner is "", Token 0 and Expires the zero time (the Java store
// records no expiry, and HBase does not return cell TTLs).
func (s *Store) InspectLock(ctx context.Context, k dcsync.Key) (dcsync.LockState, error) {
	const op = "hbase.InspectLock"
	if err := k.Validate("lock"); err != nil {
		return dcsync.LockState{}, err
	}
	if err := s.check(op); err != nil {
		return dcsync.LockState{}, err
	}
	r, err := s.readLock(ctx, layout.HBaseLockRow(k))
	if err != nil {
		return dcsync.LockState{}, wrap(err, op)
	}
	if !r.held {
		return dcsync.LockState{}, dcsync.Errorf(dcsync.NotFound, op, "%s is free", k)
	}
	return r.state(), nil
}
