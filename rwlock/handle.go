package rwlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// Lock is one hold of a read-write lock, read or write: the lease of one lock of the
// store (W for a write hold, a reader slot for a read hold). Its methods are safe for
// concurrent use.
type Lock struct {
	m    *Manager
	e    *local
	mode Mode
	name string
	slot int // the reader slot of a read hold; -1 for a write hold
	l    *lock.Lock

	mu   sync.Mutex
	done bool // released or downgraded: the local bookkeeping is undone
}

// Mode returns Read or Write.
func (l *Lock) Mode() Mode { return l.mode }

// Name returns the read-write lock's name.
func (l *Lock) Name() string { return l.name }

// Slot returns the reader slot a read hold is in (0 to M-1), -1 for a write hold.
func (l *Lock) Slot() int { return l.slot }

// Key returns the key of the lock the hold is the lease of: W or the reader slot.
func (l *Lock) Key() dcsync.Key { return l.l.Key() }

// Owner returns the owner id of the hold's lock.
func (l *Lock) Owner() string { return l.l.Owner() }

// Token returns the fencing token: for a write hold W's token, greater than every
// earlier writer's; for a read hold its slot's token, greater than every earlier
// holder's of that slot (see Tokens in the package doc).
func (l *Lock) Token() uint64 { return l.l.Token() }

// TTL returns the lease length.
func (l *Lock) TTL() time.Duration { return l.l.TTL() }

// Expires returns when the lease ends unless renewed, by the store's clock (for
// display; see lock.Lock.Expires).
func (l *Lock) Expires() time.Time { return l.l.Expires() }

// Deadline returns when this process treats the lease as over unless it is renewed (see
// lock.Lock.Deadline).
func (l *Lock) Deadline() time.Time { return l.l.Deadline() }

// Held reports whether the lease still runs by this process's reckoning (see
// lock.Lock.Held).
func (l *Lock) Held() bool { return l.l.Held() }

// KeepAlive renews the lease until Release (or Downgrade), until ctx ends, or until
// the lease is lost, and returns a context cancelled the moment the lease is lost
// (context.Cause: LockLost). Run the protected work under it. The KeepAlives of one
// Manager are renewed together, in one store call per interval (see lock.Lock.KeepAlive).
func (l *Lock) KeepAlive(ctx context.Context) context.Context { return l.l.KeepAlive(ctx) }

// Refresh renews the lease once (see lock.Lock.Refresh).
func (l *Lock) Refresh(ctx context.Context) error { return l.l.Refresh(ctx) }

// Release ends the hold and frees its lock (W or the reader slot). It returns LockLost,
// leaving the lock alone, when the hold's lease was lost. Waiters of this process look
// again at once.
func (l *Lock) Release(ctx context.Context) error {
	err := l.l.Release(ctx)
	l.undo()
	return err
}

// undo takes the hold out of this process's bookkeeping, once.
func (l *Lock) undo() {
	l.mu.Lock()
	done := l.done
	l.done = true
	l.mu.Unlock()
	if done {
		return
	}
	if l.mode == Read {
		l.e.unmark(l.slot)
	} else {
		l.e.writer(-1)
	}
	l.e.leave()
}

// Downgrade turns a write hold into a read hold with no instant between them at which
// the holder holds neither: it takes a reader slot while it still holds W (no need to
// read W: it is its own), then releases W. Readers waiting for the writer then come
// in; a writer waiting for W takes it and then waits for this read hold to end.
//
// On success l is released (its KeepAlive's context ends with cause context.Canceled)
// and the returned read Lock holds: start its KeepAlive to go on working. It waits for a
// free slot while ctx lasts (slots are free but for readers that take one and give it
// back on finding W held). It returns LockLost, holding nothing, when W was lost before
// the slot was taken (another writer may have come in), and InvalidArgument for a read
// hold.
func (l *Lock) Downgrade(ctx context.Context) (*Lock, error) {
	const op = "rwlock.Downgrade"
	if l.mode != Write {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%s is a read hold", l.name)
	}
	if !l.l.Held() {
		return nil, driver.Errorf(dcsync.LockLost, op, "the write hold of %s is over", l.name)
	}
	m := l.m
	key := l.l.Key()
	s := spec{name: l.name, level: key.Level, ttl: l.l.TTL(), id: l.e.key.id}
	n, err := m.size(ctx, op, s)
	if err != nil {
		return nil, err
	}
	b := backoff{cur: m.minBackoff, max: m.maxBackoff}
	var slot int
	var r *lock.Lock
	for {
		ch := l.e.changes()
		slot, r, err = m.grab(ctx, s, n, l.e)
		if err == nil {
			break
		}
		if !retryable(err) {
			return nil, err
		}
		if !l.l.Held() {
			return nil, driver.Errorf(dcsync.LockLost, op, "the write hold of %s ran out while waiting for a reader slot", l.name)
		}
		if err := b.pause(ctx, ch, nil, l.l.Deadline()); err != nil {
			return nil, driver.Errorf(dcsync.LockUnavailable, op, "%s: no reader slot before ctx ended: %v", l.name, err)
		}
	}
	// The slot is held; now W goes. An owner-checked release that succeeds proves W
	// was this holder's from its acquisition until now: no writer came in between.
	if err := l.l.Release(ctx); err != nil {
		m.giveBack(r, slot, l.e)
		l.undo()
		if errors.Is(err, dcsync.ErrLockLost) {
			return nil, driver.Errorf(dcsync.LockLost, op, "W of %s was lost before the downgrade: %v", l.name, err)
		}
		return nil, err
	}
	// The write hold's reference passes to the read hold.
	l.mu.Lock()
	l.done = true
	l.mu.Unlock()
	l.e.writer(-1)
	return &Lock{m: m, e: l.e, mode: Read, name: l.name, slot: slot, l: r}, nil
}
