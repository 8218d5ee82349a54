package lock

import (
	"context"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Taken is one lock of a TryAcquireMany: the Lock, or why it was not taken
// (LockUnavailable when someone holds it).
type Taken struct {
	Lock *Lock
	Err  error
}

// TryAcquireMany is TryAcquire of every lock of names, with the same call options, in
// one store call on a store that implements driver.LockMover (one AcquireLock at a
// time on another). Result i belongs to names[i], each with TryAcquire's outcome: a
// Lock with a fresh fencing token, or LockUnavailable when someone holds it (a name
// given twice is taken once). The returned error is for the call as a whole: an invalid
// name or option (nothing is tried), or the store failing the batch (nothing is
// taken). A take whose outcome is unknown (a Connection error, for one lock or the
// whole batch) is given back, under the owner id it was sent with, before
// TryAcquireMany returns: a take that landed does not stay held by an owner nobody
// knows until its lease ends.
func (m *Manager) TryAcquireMany(ctx context.Context, names []string, opts ...CallOption) ([]Taken, error) {
	reqs := make([]driver.LockAcquire, len(names))
	var ttl time.Duration
	for i, name := range names {
		k, s, err := m.spec(name, opts)
		if err != nil {
			return nil, err
		}
		ttl = s.ttl
		reqs[i] = driver.LockAcquire{Key: k, Owner: newOwner(), TTL: s.ttl}
	}
	out := make([]Taken, len(names))
	if len(names) == 0 {
		return out, nil
	}
	sent := m.clk.now()
	start := time.Now()
	res, err := driver.AcquireLocks(ctx, m.store, reqs)
	m.tel.StoreCall(ctx, "acquire_locks", start, err)
	if err == nil && len(res) != len(reqs) {
		err = driver.Errorf(dcsync.Internal, "lock.TryAcquireMany", "the store returned %d results for %d locks", len(res), len(reqs))
	}
	if err != nil {
		if dcsync.CodeOf(err) == dcsync.Connection {
			m.giveBack(reqs)
		}
		return nil, driver.Wrap(err, dcsync.Internal, "lock.TryAcquireMany")
	}
	var doubt []driver.LockAcquire
	for i, r := range res {
		err := driver.Wrap(r.Err, dcsync.Internal, "lock.TryAcquire")
		m.tel.Acquired(ctx, "lock.try_acquire", reqs[i].Key.Level, start, err)
		if err != nil {
			if dcsync.CodeOf(err) == dcsync.Connection {
				doubt = append(doubt, reqs[i])
			}
			out[i].Err = err
			continue
		}
		out[i].Lock = newLock(m, reqs[i].Key, ttl, r.State, sent)
	}
	m.giveBack(doubt)
	return out, nil
}

// giveBackTimeout bounds giveBack's store call.
const giveBackTimeout = 10 * time.Second

// giveBack releases the takes of reqs whose outcome is unknown (a Connection error:
// the take may have landed and its reply been lost), under the owner ids they were
// sent with, so that a take that did land is not left held, by an owner nobody knows,
// until its lease ends. A take that did not land is untouched: the release is
// owner-checked, so it is LockLost then, and it never frees another owner's lock. It
// runs on a context of its own (the caller's may be what ended the take), and its
// failures are only logged: the lease ends the hold then, as it would have.
func (m *Manager) giveBack(reqs []driver.LockAcquire) {
	if len(reqs) == 0 {
		return
	}
	rels := make([]driver.LockRelease, len(reqs))
	for i, r := range reqs {
		rels[i] = driver.LockRelease{Key: r.Key, Owner: r.Owner}
	}
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	res, err := driver.ReleaseLocks(ctx, m.store, rels)
	if err != nil {
		m.log.Debug("lock: could not give back takes in doubt; their leases end them", "locks", len(rels), "err", err)
		return
	}
	for i, r := range res {
		if r.Err != nil && dcsync.CodeOf(r.Err) != dcsync.LockLost {
			m.log.Debug("lock: could not give back a take in doubt; its lease ends it", "key", rels[i].Key.String(), "err", r.Err)
		}
	}
}

// ReleaseMany is Release of every lock of locks, each taken through m, in one store
// call on a store that implements driver.LockMover (one ReleaseLock at a time on
// another). Error i belongs to locks[i], each with Release's outcome (LockLost for a
// lock no longer held, which is left alone; a Connection error for a lock whose
// KeepAlive was still in a store call when ctx ended, left to expire). A lock of
// another Manager gets InvalidArgument and is left as it is.
func (m *Manager) ReleaseMany(ctx context.Context, locks []*Lock) []error {
	errs := make([]error, len(locks))
	var reqs []driver.LockRelease
	var idx []int
	for i, l := range locks {
		if l == nil || l.m != m {
			errs[i] = driver.Errorf(dcsync.InvalidArgument, "lock.ReleaseMany", "lock %d was not taken through this manager", i)
			continue
		}
		if err := l.stopForRelease(ctx); err != nil {
			errs[i] = err
			continue
		}
		reqs = append(reqs, driver.LockRelease{Key: l.key, Owner: l.owner})
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		return errs
	}
	start := time.Now()
	res, err := driver.ReleaseLocks(ctx, m.store, reqs)
	m.tel.StoreCall(ctx, "release_locks", start, err)
	if err == nil && len(res) != len(reqs) {
		err = driver.Errorf(dcsync.Internal, "lock.ReleaseMany", "the store returned %d results for %d locks", len(res), len(reqs))
	}
	for j, i := range idx {
		e := err
		if e == nil {
			e = res[j].Err
		}
		errs[i] = locks[i].releasedWith(e)
	}
	return errs
}
