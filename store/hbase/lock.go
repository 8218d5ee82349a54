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

// lockRow is a lock row as read.
type lockRow struct {
	held    bool   // D:L exists
	owner   string // D:O, "" for a Java-held lock
	token   uint64 // the holder's fencing token (D:T, or D:F for a hold that took it), 0 when unknown
	expires time.Time
	expRaw  []byte // D:E as stored
	ts      int64  // the latest timestamp of the row's lock cells: the version of the holder's cells
	// tokenQual is the cell token was read from (qualToken or qualFence), nil when 0:
	// ownedBy conditions on it, so that a write meant for one acquisition never lands
	// on another of the same owner.
	tokenQual []byte
	fence     uint64 // D:F, the row's fencing counter
	fenceTs   int64  // its version: at or after fenceBase once it holds tokens
	// javaHidden: the row also hides a Java hold (lock_masked.go); set by casTake only.
	javaHidden bool
}

func (r lockRow) state() driver.LockState {
	return driver.LockState{Owner: r.owner, Token: r.token, Expires: r.expires}
}

// fenceBase is the version of a lock row's fencing counter D:F (epoch ms, about 146
// million years from now). A delete marker hides only the versions at or before its
// own timestamp, and a Java release is a row delete stamped with the server's time,
// so it never hides the counter; HBase stamps each increment of it max(server time,
// previous version + 1), so it stays above fenceBase. See the package doc.
const fenceBase = int64(1) << 62

// fenceRow returns the row of k's fencing counter before the counter moved into the lock
// row (and, for a key that shares its Java lock row with another, still):
// Salt("F#" + IdentityKey(k)). The identity key is unambiguous, so two keys that share
// a Java lock row ("a#b"+"c" and "a"+"b#c") have counters of their own; no Java lock
// row starts with "F#".
func fenceRow(k dcsync.Key) []byte {
	return layout.Salt(FencePrefix + layout.IdentityKey(k))
}

func parseLock(cells []hbaserpc.Cell) lockRow {
	var r lockRow
	var tokT []byte
	var tokTs int64
	for _, c := range cells {
		if !bytes.Equal(c.Family, famLock) {
			continue
		}
		if bytes.Equal(c.Qualifier, qualFence) {
			if len(c.Value) == 8 {
				r.fence, r.fenceTs = uint64(int64FromBE(c.Value)), c.Timestamp
			}
			continue
		}
		r.ts = max(r.ts, c.Timestamp)
		switch {
		case bytes.Equal(c.Qualifier, qualLock):
			r.held = len(c.Value) > 0 // HBase's if-absent treats an empty value as absent
		case bytes.Equal(c.Qualifier, qualOwner):
			r.owner = string(c.Value)
		case bytes.Equal(c.Qualifier, qualToken):
			if len(c.Value) == 8 {
				tokT, tokTs = c.Value, c.Timestamp
			}
		case bytes.Equal(c.Qualifier, qualExpiry):
			if len(c.Value) == 8 {
				r.expRaw = c.Value
				r.expires = time.UnixMilli(int64FromBE(c.Value))
			}
		}
	}
	if !r.held {
		return lockRow{fence: r.fence, fenceTs: r.fenceTs}
	}
	switch {
	case tokT != nil && tokTs == r.ts:
		// Written by the holder's acquire (a key sharing its Java row with another, or a
		// version of dcsync before the counter moved into the lock row).
		r.token, r.tokenQual = uint64(int64FromBE(tokT)), qualToken
	case r.owner != "" && r.fenceTs >= fenceBase:
		// Bumped by the holder's acquire, in the same atomic write that took the row:
		// no other acquire can bump it while the row is held.
		r.token, r.tokenQual = r.fence, qualFence
	}
	return r
}

func (s *Store) readLock(ctx context.Context, row []byte) (lockRow, error) {
	cells, err := s.db.Get(ctx, s.lockTable, row, hbaserpc.Column{Family: famLock})
	if err != nil {
		return lockRow{}, err
	}
	return parseLock(cells), nil
}

func int64FromBE(b []byte) int64 { v, _ := hbaserpc.Int64(b); return v }

// releaseMargin is how much longer than the holder's recorded expiry the empty cells of
// a release live: they must outlive the cells they replace (see ownedRelease), whose
// TTL counts by the server's clock while D:E was computed by the holder's.
const releaseMargin = 24 * time.Hour

// ownedRelease frees the lock row r, held by this store's owner, without a delete
// marker: it overwrites the holder's cells L, O, E and T at their own version r.ts with
// empty values. HBase reads the latest write of a cell version, and its check "D:L
// absent" (dcsync's and the Java acquire's) takes an empty value as absent, so the lock
// is free at once; and since no marker is written, nothing written afterwards is
// hidden, not even a Put of the same millisecond (the later write of a version wins),
// nor a Java Put stamped with a client clock behind the server's by less than the time
// the lock was held. The empty cells live until the replaced ones would have expired
// (by D:E) plus releaseMargin, so an older write of the same version never shows
// through.
func ownedRelease(r lockRow) *hbaserpc.Put {
	ttl := releaseMargin
	if !r.expires.IsZero() && r.expires.UnixMilli() > r.ts {
		ttl += time.Duration(r.expires.UnixMilli()-r.ts) * time.Millisecond
	}
	return &hbaserpc.Put{Values: []hbaserpc.Value{
		{Family: famLock, Qualifier: qualLock},
		{Family: famLock, Qualifier: qualOwner},
		{Family: famLock, Qualifier: qualExpiry},
		{Family: famLock, Qualifier: qualToken},
	}, Timestamp: r.ts, TTL: ttl}
}

// ownedBy is the condition that r is still the row read: the same owner, with the same
// recorded expiry (a refresh of that owner changes it) and the same token (a new
// acquisition changes it, also by the same owner).
func ownedBy(owner string, r lockRow) hbaserpc.Condition {
	if len(r.expRaw) != 8 {
		return hbaserpc.IfEquals(famLock, qualOwner, []byte(owner))
	}
	conds := []hbaserpc.Condition{hbaserpc.IfEquals(famLock, qualOwner, []byte(owner)), hbaserpc.IfEquals(famLock, qualExpiry, r.expRaw)}
	if r.tokenQual != nil {
		conds = append(conds, hbaserpc.IfEquals(famLock, r.tokenQual, be64(r.token)))
	}
	return hbaserpc.IfAll(conds...)
}

func holder(r lockRow) string {
	if r.owner == "" {
		return "a Java client"
	}
	return "owner " + r.owner
}

func unavailable(op string, k dcsync.Key, r lockRow) error {
	return driver.Errorf(dcsync.LockUnavailable, op, "%s is held by %s", k, holder(r))
}

func lost(op string, k dcsync.Key, owner string) error {
	return driver.Errorf(dcsync.LockLost, op, "%s is not held by owner %s", k, owner)
}

// AcquireLock takes the lock at k for owner with a lease of ttl, in one call:
//
//   - check-and-mutate "D:L absent", applying atomically a Put of L, O and E, stamped
//     by the server, with the lease as cell TTL (the Java acquire, HBaseStore.java:78-82,
//     plus dcsync's cells), and an Increment of the row's fencing counter D:F (no TTL;
//     its version is above fenceBase, so no delete marker hides it): the token. Not
//     applied, nothing is written and the counter is not bumped. Applied, the token is
//     larger than every earlier holder's: each took the row, and bumped the counter, in
//     one atomic write while the row was free of any other holder.
//   - in the same call to the server, a Get of the row after the write. It shows the
//     holder: another holder means LockUnavailable (Owner "" and Token 0 for a Java
//     holder). Applied but not visible means a delete marker of the same millisecond or
//     later hides our cells (a Java release: dcsync's releases write no marker): the
//     acquire starts over, so dcsync never reports a lock it cannot be seen to hold. The
//     same call also reads the row raw: a Java hold hidden by a Java release
//     (lock_masked.go) means the row just taken is given back and LockUnavailable.
//
// The row state read back is remembered (lock_held.go), so the release and refreshes
// of this acquisition need no read first.
//
// A row this store has not seen with its counter above fenceBase (movedRows: every new
// key, and every key this store has not taken yet) costs one call more, before the
// take: a MultiGet of the row and of the key's counter of the earlier layout
// (readFence, the read of AcquireLocks). A row held by another owner is then
// LockUnavailable without the take. A row without D:F gets its counter created in the
// take, by an Increment of the earlier counter + 1 at version fenceBase
// (freshIncrement, AcquireLocks' technique): a new key costs two calls and one
// conditional action, where moving the counter after the take cost three and two.
// A counter still below fenceBase after the take (the read failed, or a take that did
// not move it created it meanwhile) is moved as before: max(the earlier counter, D:F)
// + 1 put at version fenceBase, conditioned on the row still being ours (ownedBy)
// (moveFence: one call, or two when the earlier counter was not read). A key that
// shares its Java lock row with another (layout.AmbiguousLockKey) keeps the earlier
// layout: acquireShared.
//
// When the outcome of the write is unknown, the row is read back: our owner id in D:O
// means it took effect (with the token, in the same write); an absent lock means it
// did not, and the write is sent again (at most a few times); another holder means
// LockUnavailable. A resend that finds the lock held by our own owner id (an earlier
// attempt that reached the server late) goes on as if it had been applied. When ctx
// ends during the write, see abandon.
func (s *Store) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	const op = "hbase.AcquireLock"
	if err := driver.CheckLease(k, owner, ttl); err != nil {
		return driver.LockState{}, err
	}
	if err := s.check(op); err != nil {
		return driver.LockState{}, err
	}
	if err := s.ready(ctx, op, &s.locks); err != nil {
		return driver.LockState{}, err
	}
	row := layout.HBaseLockRow(k)
	if err := s.hiddenJavaHoldFirst(ctx, op, k, row); err != nil {
		return driver.LockState{}, err
	}
	shared := layout.AmbiguousLockKey(k)
	var pre fenceRead
	if !shared && !s.moved.has(row) {
		var r lockRow
		pre, r = s.readFence(ctx, k, row)
		if r.held && r.owner != owner {
			return r.state(), unavailable(op, k, r)
		}
	}
	var last error
	for try := 0; try < maxTries; try++ {
		if try > 1 {
			// The first retry goes at once: its usual cause, a delete marker of the same
			// millisecond, is already in the past.
			if err := sleepCtx(ctx, time.Duration(try-1)*time.Millisecond); err != nil {
				return driver.LockState{}, ctxErr(ctx, op)
			}
		}
		// The lease runs from before the write is sent: every cell written here expires
		// by then (plus the write's own latency), not later.
		sent := time.Now()
		expires := sent.Add(ttl)
		var inc *hbaserpc.Increment
		if !shared {
			inc = takeIncrement(pre)
		}
		pre.absent = false // a try again increments the counter the first may have created
		applied, r, err := s.casTake(ctx, row, owner, expires, ttl, inc)
		if err != nil {
			return s.abandon(ctx, op, k, row, owner, err)
		}
		if r.fenceTs >= fenceBase {
			s.moved.add(row)
		}
		switch {
		case r.held && r.owner != owner:
			return r.state(), unavailable(op, k, r)
		case !r.held && applied:
			s.log.Debug("hbase: acquired cells hidden by a delete marker; retrying", "key", k.String(), "try", try)
			last = driver.Errorf(dcsync.LockUnavailable, op, "%s: acquired cells hidden by a delete of the same millisecond", k)
			continue
		case !r.held:
			last = driver.Errorf(dcsync.LockUnavailable, op, "%s: freed and taken again while acquiring", k)
			continue
		case r.javaHidden:
			return s.yieldToHiddenJava(op, k, row, owner, r)
		case r.token != 0:
			// Taken by this write with its token, or by a late earlier attempt of this
			// acquire.
			if applied {
				s.held.remember(row, owner, heldLock{r: r, anchorS: r.ts, anchorC: sent})
			}
			return r.state(), nil
		}
		var ok bool
		if shared {
			r, ok, err = s.acquireShared(ctx, k, row, owner, ttl, r)
		} else {
			r, ok, err = s.moveFence(ctx, k, row, owner, r, pre)
		}
		if err != nil {
			s.releaseQuiet(row, owner, r)
			return driver.LockState{}, wrap(err, op)
		}
		if ok {
			if applied {
				s.held.remember(row, owner, heldLock{r: r, anchorS: r.ts, anchorC: sent})
			}
			return r.state(), nil
		}
		// Our cells are gone: the lease lapsed, and someone else may hold the lock now.
		// Start over; the take tells.
		s.log.Debug("hbase: lease lapsed while acquiring; retrying", "key", k.String(), "try", try)
		last = driver.Errorf(dcsync.LockUnavailable, op, "%s: lease lapsed while acquiring", k)
	}
	return driver.LockState{}, last
}

// acquireShared ends the acquire of a key that shares its Java lock row with another
// (layout.AmbiguousLockKey), after the take: the keys of a row have counters of their
// own, in the rows of the earlier layout (fenceRow), so the token is bumped there and
// recorded in D:T, in two more calls:
//
//  1. Increment the key's fencing counter (nonce'd, so a retried Increment counts
//     once). It is bumped only once the lock is held, so it is larger than the token
//     of every earlier holder (each bumped while it held the lock), also when the take
//     reached the server late.
//  2. check-and-mutate "D:O == owner and D:E as the take wrote it": put T at the version
//     of the taken cells, with the same TTL (it ends with them). Not applied: the lease
//     lapsed during the two calls and someone else may hold the lock: ok false, and the
//     acquire starts over. The expiry in the condition makes a try that lands late,
//     after the holder's first refresh, change nothing (it would put T again with the
//     acquire's shorter TTL).
func (s *Store) acquireShared(ctx context.Context, k dcsync.Key, row []byte, owner string, ttl time.Duration, r lockRow) (lockRow, bool, error) {
	token, err := s.bumpFence(ctx, k)
	if err != nil {
		return r, false, err
	}
	ok, err := s.casRecord(ctx, row, owner, token, ttl, r)
	if err != nil || !ok {
		return r, false, err
	}
	r.token, r.tokenQual = token, qualToken
	return r, true, nil
}

// moveFence ends the first acquire of a row whose counter D:F is not yet above
// fenceBase (see AcquireLock): it puts max(the key's counter of the earlier layout
// (pre.old when readFence read it, else read here), D:F) + 1 into D:F at version
// fenceBase, if owner still holds the row as taken (ownedBy). A try that lands late
// finds the row changed (not applied), or D:F already above fenceBase, where a Put at
// fenceBase is an older version and changes nothing. ok false: the lease lapsed
// meanwhile, and the acquire starts over.
func (s *Store) moveFence(ctx context.Context, k dcsync.Key, row []byte, owner string, r lockRow, pre fenceRead) (lockRow, bool, error) {
	const op = "hbase.AcquireLock"
	old := pre.old
	if !pre.read {
		cells, err := s.db.Get(ctx, s.lockTable, fenceRow(k), hbaserpc.Column{Family: famLock, Qualifier: qualFence})
		if err != nil {
			return r, false, err
		}
		for _, c := range cells {
			v, err := decode64(op, c)
			if err != nil {
				return r, false, err
			}
			old = uint64(max(v, 0))
		}
	}
	token := max(old, r.fence) + 1
	put := &hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualFence, Value: be64(token)}}, Timestamp: fenceBase}
	for try := 0; ; try++ {
		ok, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, ownedBy(owner, r), put)
		if err == nil {
			if ok {
				r.token, r.tokenQual, r.fence, r.fenceTs = token, qualFence, token, fenceBase
				s.moved.add(row)
			}
			return r, ok, nil
		}
		if !inDoubt(err) || try >= maxTries-1 {
			return r, false, err
		}
		back, rerr := s.readLock(ctx, row)
		if rerr != nil {
			return r, false, err
		}
		s.log.Debug("hbase: fencing counter move outcome unknown; read back", "row", row, "held", back.held, "token", back.token)
		switch {
		case !back.held || back.owner != owner || !bytes.Equal(back.expRaw, r.expRaw):
			return r, false, nil
		case back.token != 0:
			return back, true, nil
		}
		// Still ours, counter not moved: not applied; send it again.
	}
}

// readFence is AcquireLock's read before the take of a row this store has not seen
// with its counter above fenceBase (movedRows): one MultiGet of the lock row's cells
// and of k's counter of the earlier layout (fenceGets, the read of AcquireLocks'
// readFences). It returns what the take's Increment needs (takeIncrement) and the row
// as read: held by another owner, the acquire reports LockUnavailable at once, as the
// take would (its condition "D:L absent" fails while the row is held), without writing.
// A read that fails leaves f.read false: the take then increments the counter by 1, and
// a counter so created below fenceBase is moved after it (moveFence), as before.
func (s *Store) readFence(ctx context.Context, k dcsync.Key, row []byte) (f fenceRead, r lockRow) {
	cells, err := s.db.MultiGet(ctx, s.lockTable, fenceGets(k, row, hbaserpc.Column{Family: famLock}))
	if err != nil || len(cells) != 2 {
		s.log.Debug("hbase: reading the fencing counters before an acquire failed; taking without them", "key", k.String(), "err", err)
		return fenceRead{}, lockRow{}
	}
	return s.parseFences(row, cells[0], cells[1]), parseLock(cells[0])
}

// abandon ends an acquire whose take failed with err. When ctx has ended, the outcome
// may still be unknown, so the row is read back on a short deadline of its own: a lock
// this acquire took after all is released at once (rather than blocking everyone for
// the lease), and a lock someone else holds is reported as LockUnavailable, wrapping
// ctx's error.
func (s *Store) abandon(ctx context.Context, op string, k dcsync.Key, row []byte, owner string, err error) (driver.LockState, error) {
	cerr := ctx.Err()
	if cerr == nil {
		return driver.LockState{}, wrap(err, op)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	r, rerr := s.readLock(rctx, row)
	switch {
	case rerr != nil:
	case r.held && r.owner == owner:
		s.releaseQuiet(row, owner, r)
	case r.held:
		return r.state(), &dcsync.Error{Code: dcsync.LockUnavailable, Op: op,
			Msg: k.String() + " is held by " + holder(r) + "; gave up", Err: cerr}
	}
	return driver.LockState{}, wrap(err, op)
}

// casTake is AcquireLock's write: it reports whether the check-and-mutate was applied
// and the row as read right after it. With inc (takeIncrement), the write also bumps
// the row's fencing counter, in the same conditional write. It resolves an unknown
// outcome by reading back.
func (s *Store) casTake(ctx context.Context, row []byte, owner string, expires time.Time, ttl time.Duration, inc *hbaserpc.Increment) (bool, lockRow, error) {
	muts := []hbaserpc.Mutation{&hbaserpc.Put{Values: []hbaserpc.Value{
		{Family: famLock, Qualifier: qualLock, Value: lockMarker},
		{Family: famLock, Qualifier: qualOwner, Value: []byte(owner)},
		{Family: famLock, Qualifier: qualExpiry, Value: be64(uint64(expires.UnixMilli()))},
	}, TTL: ttl}}
	if inc != nil {
		muts = append(muts, inc)
	}
	for try := 0; ; try++ {
		ok, cells, javaHidden, err := s.takeRead(ctx, row, hbaserpc.IfAbsent(famLock, qualLock), muts)
		if err == nil {
			r := parseLock(cells)
			r.javaHidden = javaHidden
			return ok, r, nil
		}
		if !inDoubt(err) || try >= maxTries-1 {
			return false, lockRow{}, err
		}
		r, rerr := s.readLock(ctx, row)
		if rerr != nil {
			return false, lockRow{}, err
		}
		s.log.Debug("hbase: acquire outcome unknown; read back", "row", row, "held", r.held, "mine", r.owner == owner)
		if r.held {
			return false, r, nil
		}
		// Absent: not applied (or not yet, or already lapsed); send it again.
	}
}

// casRecord is step 2 of acquireShared: it puts the token at version r.ts (the version of
// the taken cells, r) with the lease's TTL, if owner still holds the lock with the
// expiry the take recorded (ownedBy), and resolves an unknown outcome by reading back.
func (s *Store) casRecord(ctx context.Context, row []byte, owner string, token uint64, ttl time.Duration, r lockRow) (bool, error) {
	put := &hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualToken, Value: be64(token)}}, TTL: ttl, Timestamp: r.ts}
	for try := 0; ; try++ {
		ok, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, ownedBy(owner, r), put)
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
				return 0, driver.Errorf(dcsync.Internal, op, "fencing counter of %s is %d", k, v)
			}
			return uint64(v), nil
		}
	}
	return 0, driver.Errorf(dcsync.Internal, op, "Increment of the fencing counter of %s returned no value", k)
}

// releaseQuiet frees a lock row r that owner holds, after a failure, best effort,
// on its own short deadline (the caller's ctx may be what failed).
func (s *Store) releaseQuiet(row []byte, owner string, r lockRow) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, ownedBy(owner, r), ownedRelease(r)); err != nil {
		s.log.Debug("hbase: releasing a half-taken lock failed; it lapses with its lease", "row", row, "err", err)
	}
}

// RefreshLock extends owner's lease to ttl from now. When this store remembers the row
// state its acquire or last refresh produced (lock_held.go), it sends the write at once;
// otherwise it first reads the row and the server's clock in one call (LockLost unless
// owner holds it and its recorded expiry D:E has not passed). The write is a
// check-and-mutate "D:O == owner, D:E and the token cell as known" (ownedBy) putting
// L, O and E again (and T, for a hold whose token is in T), at the timestamp the
// holder's cells already have (so a later release, stamped there, still hides only
// them; see the package doc), with a TTL that ends ttl after an upper bound of the
// server's time when the write lands (anchoredTTL). The expiry in the condition is the
// exact lease the write replaces: a try that lands late, after a later refresh of the
// same owner, is not applied, so it cannot set the lease back to its own, earlier, end
// (TestLockLateRefresh). When the write is not applied or its outcome is unknown, the
// row is read back: another or no owner means LockLost; our owner with an expiry at
// or after this try's means refreshed (this try landed, or a later refresh did); our
// owner with an earlier expiry means not applied (or a remembered state out of date),
// and the write is sent again, conditioned on the row now stored.
func (s *Store) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	const op = "hbase.RefreshLock"
	if err := driver.CheckLease(k, owner, ttl); err != nil {
		return driver.LockState{}, err
	}
	if err := s.check(op); err != nil {
		return driver.LockState{}, err
	}
	if err := s.ready(ctx, op, &s.locks); err != nil {
		return driver.LockState{}, err
	}
	row := layout.HBaseLockRow(k)
	h, known := s.held.get(row, owner)
	if known && !time.Now().Before(h.r.expires) {
		known = false // lapsed by what this store knows: ask the store
	}
	if !known {
		var err error
		if h, err = s.readHeld(ctx, row); err != nil {
			return driver.LockState{}, wrap(err, op)
		}
		r := h.r
		if !r.held || r.owner != owner || !r.expires.IsZero() && !time.Now().Before(r.expires) {
			s.held.forget(row, owner)
			return driver.LockState{}, lost(op, k, owner)
		}
	}
	for try := 0; ; try++ {
		st, ok, err := s.refreshOnce(ctx, row, owner, ttl, h)
		if err == nil && ok {
			return st, nil
		}
		if err != nil && (!inDoubt(err) || try >= maxTries-1) {
			return driver.LockState{}, wrap(err, op)
		}
		back, rerr := s.readHeld(ctx, row)
		if rerr != nil {
			if err == nil {
				err = rerr
			}
			return driver.LockState{}, wrap(err, op)
		}
		b := back.r
		s.log.Debug("hbase: refresh not applied or in doubt; read back", "key", k.String(), "held", b.held, "mine", b.owner == owner, "err", err)
		switch {
		case !b.held || b.owner != owner:
			s.held.forget(row, owner)
			return driver.LockState{}, lost(op, k, owner)
		case b.expires.UnixMilli() >= st.Expires.UnixMilli() && b.token == h.r.token:
			// This try landed, or a later refresh of ours: the lease ends at or after
			// the try's end.
			if h.r.ts == b.ts {
				h.r = b
				s.held.remember(row, owner, h)
			}
			return driver.LockState{Owner: owner, Token: b.token, Expires: st.Expires}, nil
		case try >= maxTries-1 || !b.expires.IsZero() && !time.Now().Before(b.expires):
			s.held.forget(row, owner)
			return driver.LockState{}, lost(op, k, owner)
		}
		h = back // changed under us by another write of ours: replace what is there now
	}
}

// readHeld reads a lock row and the server's clock in one call, as an anchor for the
// TTL of a write at the version of the holder's cells.
func (s *Store) readHeld(ctx context.Context, row []byte) (heldLock, error) {
	sent := time.Now()
	cells, now, err := s.db.GetWithClock(ctx, s.lockTable, row, famLock, hbaserpc.Column{Family: famLock})
	if err != nil {
		return heldLock{}, err
	}
	return heldLock{r: parseLock(cells), anchorS: now, anchorC: sent}, nil
}

// refreshWrite returns the condition and Put of a refresh of h's row for owner, sent
// at sent, and the state it sets.
func refreshWrite(owner string, ttl time.Duration, h heldLock, sent time.Time) (hbaserpc.Condition, *hbaserpc.Put, driver.LockState) {
	r := h.r
	expires := sent.Add(ttl)
	put := &hbaserpc.Put{Values: []hbaserpc.Value{
		{Family: famLock, Qualifier: qualLock, Value: lockMarker},
		{Family: famLock, Qualifier: qualOwner, Value: []byte(owner)},
		{Family: famLock, Qualifier: qualExpiry, Value: be64(uint64(expires.UnixMilli()))},
	}, TTL: h.cellTTL(sent, ttl), Timestamp: r.ts}
	if bytes.Equal(r.tokenQual, qualToken) {
		put.Values = append(put.Values, hbaserpc.Value{Family: famLock, Qualifier: qualToken, Value: be64(r.token)})
	}
	return ownedBy(owner, r), put, driver.LockState{Owner: owner, Token: r.token, Expires: expires}
}

// refreshed returns h with the row state a refresh to st wrote.
func refreshed(h heldLock, st driver.LockState) heldLock {
	h.r.expires = time.UnixMilli(st.Expires.UnixMilli())
	h.r.expRaw = be64(uint64(st.Expires.UnixMilli()))
	return h
}

// refreshOnce sends one refresh write of h's row and remembers the new state when it
// is applied.
func (s *Store) refreshOnce(ctx context.Context, row []byte, owner string, ttl time.Duration, h heldLock) (driver.LockState, bool, error) {
	cond, put, st := refreshWrite(owner, ttl, h, time.Now())
	ok, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, cond, put)
	if err == nil && ok {
		s.held.remember(row, owner, refreshed(h, st))
	}
	return st, ok, err
}

// ReleaseLock frees the lock if owner holds it, with a check-and-mutate "D:O == owner,
// D:E and the token cell unchanged" (ownedBy) that empties the holder's cells at their
// version (ownedRelease; the fencing counter D:F is left alone). The row state comes
// from what this store remembers of the acquisition (lock_held.go): one call. Without
// a memory, or when the write is not applied (the memory was out of date: a refresh by
// another store, say), the row is read (LockLost unless owner holds it) and the write
// sent again on what was read. The release is stamped at the timestamp of the cells it
// owns, not at the server's current time, and writes no delete marker: it never hides
// a Put made after it by the next holder (see the package doc). A refresh of the same
// owner that lands in between changes D:E; the release then reads again and empties
// the refreshed cells. Not applied otherwise: LockLost. A lease already past its
// recorded expiry (D:E) is freed too but reported as LockLost.
//
// An unknown outcome is resolved by reading back D:O: no longer ours means released
// (unless the lease had run out by then: LockLost); still ours means not applied, and
// the release is sent again. A resend that finds the row free or held by another, after
// an attempt in doubt, is the first attempt having reached the server late: released,
// if the lease had not run out by then.
func (s *Store) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	const op = "hbase.ReleaseLock"
	if err := driver.CheckLock(k, owner, 0); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	if err := s.ready(ctx, op, &s.locks); err != nil {
		return err
	}
	row := layout.HBaseLockRow(k)
	h, known := s.held.get(row, owner)
	s.held.forget(row, owner)
	r := h.r
	if !known {
		var err error
		if r, err = s.readLock(ctx, row); err != nil {
			return wrap(err, op)
		}
		if !r.held || r.owner != owner {
			return lost(op, k, owner)
		}
	}
	// A lease past its recorded expiry is lost, though HBase may keep its cells for the
	// moment its write took to arrive; free it all the same.
	expired := !r.expires.IsZero() && !time.Now().Before(r.expires)
	// gone decides a row no longer ours after an attempt in doubt.
	gone := func() error {
		if expired || !r.expires.IsZero() && !time.Now().Before(r.expires) {
			return lost(op, k, owner)
		}
		return nil
	}
	doubted := false
	for try := 0; ; try++ {
		ok, _, err := s.db.CheckAndMutate(ctx, s.lockTable, row, ownedBy(owner, r), ownedRelease(r))
		if err == nil {
			if ok {
				if expired {
					return lost(op, k, owner)
				}
				return nil
			}
			back, rerr := s.readLock(ctx, row)
			if rerr != nil {
				return wrap(rerr, op)
			}
			switch {
			case back.held && back.owner == owner && try < maxTries-1:
				// Refreshed in between, or remembered out of date: empty the cells there.
				r = back
				expired = !r.expires.IsZero() && !time.Now().Before(r.expires)
				continue
			case doubted && (!back.held || back.owner != owner):
				return gone()
			}
			return lost(op, k, owner)
		}
		if !inDoubt(err) || try >= maxTries-1 {
			return wrap(err, op)
		}
		doubted = true
		back, rerr := s.readLock(ctx, row)
		if rerr != nil {
			return wrap(err, op)
		}
		s.log.Debug("hbase: release outcome unknown; read back", "key", k.String(), "held", back.held, "mine", back.owner == owner)
		if !back.held || back.owner != owner {
			return gone()
		}
		r = back
	}
}

// InspectLock returns the holder's state, or NotFound when D:L is absent. For a lock a
// Java client holds, Owner is "", Token 0 and Expires the zero time, meaning unknown:
// the Java store records no owner, token or expiry, and HBase does not return cell
// TTLs (the lease is whatever TTL that Java client was configured with).
func (s *Store) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	const op = "hbase.InspectLock"
	if err := driver.ValidateKey("lock", k); err != nil {
		return driver.LockState{}, err
	}
	if err := s.check(op); err != nil {
		return driver.LockState{}, err
	}
	if err := s.ready(ctx, op, &s.locks); err != nil {
		return driver.LockState{}, err
	}
	r, err := s.readLock(ctx, layout.HBaseLockRow(k))
	if err != nil {
		return driver.LockState{}, wrap(err, op)
	}
	if !r.held {
		return driver.LockState{}, driver.Errorf(dcsync.NotFound, op, "%s is free", k)
	}
	return r.state(), nil
}
