package rwlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// releaseTimeout bounds the release of what an acquisition gives back on its way out
// (its ctx may have ended).
const releaseTimeout = 10 * time.Second

// gaveUp returns the error of an acquisition whose wait ran out or whose ctx ended:
// LockUnavailable, matching ctx's error when ctx ended.
func gaveUp(ctx context.Context, op, what string, last error) error {
	msg := what + ": gave up waiting"
	if last != nil {
		msg += fmt.Sprintf(" (last: %v)", last)
	}
	return &dcsync.Error{Code: dcsync.LockUnavailable, Op: op, Msg: msg, Err: ctx.Err()}
}

// AcquireRead takes a read lock: it waits, for at most the wait (DefaultWait unless
// set) and while ctx lasts, until no writer holds or waits for the read-write lock and
// a reader slot is free. It returns LockUnavailable when the wait runs out (matching
// ctx's error with errors.Is when ctx ended); with Wait(0) it tries once.
func (m *Manager) AcquireRead(ctx context.Context, name string, opts ...CallOption) (*Lock, error) {
	const op = "rwlock.AcquireRead"
	s, err := m.spec(op, name, opts)
	if err != nil {
		return nil, err
	}
	n, err := m.size(ctx, op, s)
	if err != nil {
		return nil, err
	}
	e := m.join(s)
	l, err := m.acquireRead(ctx, op, s, n, e)
	if err != nil {
		e.leave()
		return nil, err
	}
	return l, nil
}

func (m *Manager) acquireRead(ctx context.Context, op string, s spec, n int, e *local) (*Lock, error) {
	deadline := time.Now().Add(s.wait)
	b := backoff{cur: m.minBackoff, max: m.maxBackoff}
	wkey := m.key(s, writerName(s.name))
	var last error
	for first := true; ; first = false {
		if !first {
			if time.Until(deadline) <= 0 || ctx.Err() != nil {
				return nil, gaveUp(ctx, op, "read lock "+s.name, last)
			}
		}
		ch := e.changes()
		if e.writerLikely() {
			// A writer was about: read W before taking a slot, so that while it waits
			// for the readers to leave, this process takes none.
			held, err := m.writerHeld(ctx, wkey)
			if err == nil && !held {
				e.saw(false)
			} else {
				if err == nil {
					e.saw(true)
					last = driver.Errorf(dcsync.LockUnavailable, op, "a writer holds or waits for %s", s.name)
				} else {
					last = err
				}
				if s.wait == 0 {
					return nil, lastOr(last, op, s)
				}
				if err := b.pause(ctx, ch, nil, deadline); err != nil {
					return nil, gaveUp(ctx, op, "read lock "+s.name, last)
				}
				continue
			}
		}
		slot, l, err := m.grab(ctx, s, n, e)
		if err != nil {
			last = err
			if !errors.Is(err, dcsync.ErrLockUnavailable) && !retryable(err) {
				return nil, err
			}
			if s.wait == 0 {
				return nil, err
			}
			if err := b.pause(ctx, ch, nil, deadline); err != nil {
				return nil, gaveUp(ctx, op, "read lock "+s.name, last)
			}
			continue
		}
		// The slot is taken; THEN W is read. See the package doc for why this order.
		held, err := m.writerHeld(ctx, wkey)
		if err == nil && !held {
			e.saw(false)
			return &Lock{m: m, e: e, mode: Read, name: s.name, slot: slot, l: l}, nil
		}
		m.giveBack(l, slot, e)
		if err == nil {
			e.saw(true)
			last = driver.Errorf(dcsync.LockUnavailable, op, "a writer holds or waits for %s", s.name)
		} else {
			last = err
			if !retryable(err) {
				return nil, err
			}
		}
		if s.wait == 0 {
			return nil, last
		}
		if err := b.pause(ctx, ch, nil, deadline); err != nil {
			return nil, gaveUp(ctx, op, "read lock "+s.name, last)
		}
	}
}

func lastOr(last error, op string, s spec) error {
	if errors.Is(last, dcsync.ErrLockUnavailable) {
		return last
	}
	return driver.Errorf(dcsync.LockUnavailable, op, "read lock %s: %v", s.name, last)
}

// retryable reports whether an acquisition may try again after err: a store that
// failed for a passing reason.
func retryable(err error) bool {
	switch dcsync.CodeOf(err) {
	case dcsync.Connection, dcsync.RetriesExhausted, dcsync.LockUnavailable:
		return true
	}
	return false
}

// writerHeld reads W: true when a writer holds it (or holds it while waiting for the
// readers to leave).
func (m *Manager) writerHeld(ctx context.Context, wkey dcsync.Key) (bool, error) {
	_, err := m.store.InspectLock(ctx, wkey)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, dcsync.ErrNotFound):
		return false, nil
	}
	return false, driver.Wrap(err, dcsync.Internal, "rwlock.Acquire")
}

// grab takes a free reader slot of n: first a random one not of this process; when
// that one is held, the free ones a batched read of every slot finds. It returns
// LockUnavailable when it found none free.
func (m *Manager) grab(ctx context.Context, s spec, n int, e *local) (int, *lock.Lock, error) {
	var free []int
	for round := 0; round < 3; round++ {
		i := e.pick(n, free)
		if i < 0 {
			break
		}
		l, err := m.locks.TryAcquire(ctx, slotName(s.name, i), lock.Level(s.level), lock.TTL(s.ttl))
		if err == nil {
			return i, l, nil
		}
		e.forget(i) // held elsewhere, or the try failed: nothing was freed
		if !errors.Is(err, dcsync.ErrLockUnavailable) {
			return -1, nil, err
		}
		rs, err := driver.InspectLocks(ctx, m.store, m.slotKeys(s, n))
		if err != nil {
			return -1, nil, driver.Wrap(err, dcsync.Internal, "rwlock.Acquire")
		}
		free = free[:0:0]
		for j, r := range rs {
			if errors.Is(r.Err, dcsync.ErrNotFound) {
				free = append(free, j)
			}
		}
		if len(free) == 0 {
			break
		}
	}
	return -1, nil, driver.Errorf(dcsync.LockUnavailable, "rwlock.Acquire", "every reader slot of %s is held", s.name)
}

// giveBack releases slot l taken by an acquisition that does not keep it.
func (m *Manager) giveBack(l *lock.Lock, slot int, e *local) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := l.Release(ctx); err != nil && !errors.Is(err, dcsync.ErrLockLost) {
		m.log.Debug("rwlock: giving back a reader slot", "key", l.Key().String(), "err", err)
	}
	e.unmark(slot)
}

// AcquireWrite takes the write lock: it takes W, waiting for it (fairly: in arrival
// order among the writers of this process), then waits until no reader holds, keeping
// W's lease alive meanwhile; readers that come while it waits wait for it. It waits
// for at most the wait (DefaultWait unless set) and while ctx lasts, and gives W back
// when either ends (LockUnavailable, matching ctx's error with errors.Is when ctx
// ended). It returns LockLost when W's lease is lost while it waits for the readers.
// With Wait(0) it tries once: LockUnavailable when W or a reader slot is held.
func (m *Manager) AcquireWrite(ctx context.Context, name string, opts ...CallOption) (*Lock, error) {
	const op = "rwlock.AcquireWrite"
	s, err := m.spec(op, name, opts)
	if err != nil {
		return nil, err
	}
	n, err := m.size(ctx, op, s)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(s.wait)
	var w *lock.Lock
	if s.wait == 0 {
		w, err = m.locks.TryAcquire(ctx, writerName(s.name), lock.Level(s.level), lock.TTL(s.ttl))
	} else {
		w, err = m.locks.Acquire(ctx, writerName(s.name), lock.Level(s.level), lock.TTL(s.ttl), lock.Wait(s.wait), lock.Fair(true))
	}
	if err != nil {
		return nil, err
	}
	e := m.join(s)
	e.writer(1)
	if err := m.drain(ctx, op, s, n, e, w, deadline); err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		if rerr := w.Release(rctx); rerr != nil && !errors.Is(rerr, dcsync.ErrLockLost) {
			m.log.Debug("rwlock: giving back W", "key", w.Key().String(), "err", rerr)
		}
		e.writer(-1)
		e.leave()
		return nil, err
	}
	return &Lock{m: m, e: e, mode: Write, name: s.name, slot: -1, l: w}, nil
}

// drain waits, holding W (w), until every reader slot is free: one batched read of the
// n slots per poll, woken at once by a release in this process. W's lease is kept alive
// while it waits.
func (m *Manager) drain(ctx context.Context, op string, s spec, n int, e *local, w *lock.Lock, deadline time.Time) error {
	keys := m.slotKeys(s, n)
	b := backoff{cur: m.minBackoff, max: m.maxBackoff}
	kctx, stop := context.WithCancel(context.Background())
	defer stop()
	var alive context.Context // W's KeepAlive, started once the readers make it wait
	var last error
	for {
		ch := e.changes()
		rs, err := driver.InspectLocks(ctx, m.store, keys)
		busy := 0
		if err == nil {
			for _, r := range rs {
				switch {
				case r.Err == nil:
					busy++
				case errors.Is(r.Err, dcsync.ErrNotFound):
				default:
					err = r.Err // unknown: count as held, ask again
					busy++
				}
			}
		}
		if err == nil && busy == 0 {
			break
		}
		if err != nil {
			last = driver.Wrap(err, dcsync.Internal, op)
			if !retryable(last) && ctx.Err() == nil {
				return last
			}
		} else {
			last = driver.Errorf(dcsync.LockUnavailable, op, "%d reader(s) hold %s", busy, s.name)
		}
		if s.wait == 0 {
			return last
		}
		if alive == nil {
			alive = w.KeepAlive(kctx)
		}
		if time.Until(deadline) <= 0 || ctx.Err() != nil {
			return gaveUp(ctx, op, "write lock "+s.name, last)
		}
		select {
		case <-alive.Done():
			return driver.Errorf(dcsync.LockLost, op, "W of %s was lost while waiting for the readers: %v", s.name, context.Cause(alive))
		default:
		}
		if err := b.pause(ctx, ch, alive.Done(), deadline); err != nil {
			return gaveUp(ctx, op, "write lock "+s.name, last)
		}
	}
	if alive != nil {
		if alive.Err() != nil {
			return driver.Errorf(dcsync.LockLost, op, "W of %s was lost while waiting for the readers: %v", s.name, context.Cause(alive))
		}
		stop() // the holder starts its own KeepAlive
	}
	if !w.Held() {
		return driver.Errorf(dcsync.LockLost, op, "W of %s ran out while waiting for the readers", s.name)
	}
	return nil
}
