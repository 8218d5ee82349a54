package rwlock

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// This file holds what a process knows of its own read-write locks: which reader slots
// its acquirers hold or are trying (so a reader does not try a slot of its own process),
// whether a writer is likely (a writer of this process holds W, or a reader of it saw W
// held), and a broadcast of its releases, so that its waiters look again at once.

// localKey names one read-write lock as this process sees it, per store value (or per
// Manager, when the store's type cannot key a map).
type localKey struct {
	scope any
	id    lockID
}

var locals = struct {
	sync.Mutex
	m map[localKey]*local
}{m: map[localKey]*local{}}

// local is the process-local state of one read-write lock; its fields are guarded by
// locals. It lives while acquirers or holds of this process use it (refs).
type local struct {
	key     localKey
	refs    int
	slots   map[int]bool  // reader slots held or being tried in this process
	writers int           // write holds of this process (W held)
	seen    bool          // the latest read of W by a reader of this process found it held
	changed chan struct{} // closed (and replaced) at every release in this process
}

// join returns the local state of s's read-write lock, with a reference the caller
// drops with leave.
func (m *Manager) join(s spec) *local {
	k := localKey{scope: m.scope, id: s.id}
	locals.Lock()
	defer locals.Unlock()
	e := locals.m[k]
	if e == nil {
		e = &local{key: k, slots: map[int]bool{}, changed: make(chan struct{})}
		locals.m[k] = e
	}
	e.refs++
	return e
}

func (e *local) leave() {
	locals.Lock()
	defer locals.Unlock()
	e.refs--
	if e.refs == 0 && locals.m[e.key] == e {
		delete(locals.m, e.key)
	}
}

// changes returns the channel the next release in this process closes. Take it before
// looking at the store, so that a release after the look is not missed.
func (e *local) changes() <-chan struct{} {
	locals.Lock()
	defer locals.Unlock()
	return e.changed
}

// notifyLocked wakes every waiter of this process. locals must be held.
func (e *local) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// writerLikely reports whether a reader should read W before taking a slot.
func (e *local) writerLikely() bool {
	locals.Lock()
	defer locals.Unlock()
	return e.writers > 0 || e.seen
}

// saw records what a reader of this process found W to be.
func (e *local) saw(held bool) {
	locals.Lock()
	e.seen = held
	locals.Unlock()
}

// pick returns a random slot of n not held or tried in this process, chosen among
// free (all slots when free is nil), and marks it tried; -1 when there is none.
func (e *local) pick(n int, free []int) int {
	locals.Lock()
	defer locals.Unlock()
	var cand []int
	if free == nil {
		if len(e.slots) < n/2 {
			// Mostly free here: draw until a slot not of this process comes up.
			for {
				if i := rand.N(n); !e.slots[i] {
					e.slots[i] = true
					return i
				}
			}
		}
		for i := range n {
			if !e.slots[i] {
				cand = append(cand, i)
			}
		}
	} else {
		for _, i := range free {
			if !e.slots[i] {
				cand = append(cand, i)
			}
		}
	}
	if len(cand) == 0 {
		return -1
	}
	i := cand[rand.N(len(cand))]
	e.slots[i] = true
	return i
}

// unmark forgets slot i (given back, released or never taken) and wakes the waiters.
func (e *local) unmark(i int) {
	locals.Lock()
	defer locals.Unlock()
	delete(e.slots, i)
	e.notifyLocked()
}

// forget forgets slot i after a try of it failed (someone else holds it), without waking
// the waiters: nothing was freed, and waking them would make waiters of this process
// wake each other in a loop, each failed try waking the next, with no backoff.
func (e *local) forget(i int) {
	locals.Lock()
	defer locals.Unlock()
	delete(e.slots, i)
}

// writer counts a write hold of this process in (d = 1) or out (d = -1); out wakes the
// waiters.
func (e *local) writer(d int) {
	locals.Lock()
	defer locals.Unlock()
	e.writers += d
	if d < 0 {
		e.notifyLocked()
	}
}

// backoff is a jittered exponential backoff, cut short by a release in this process.
type backoff struct {
	cur, max time.Duration
}

// pause sleeps for the next backoff (never past deadline) or until ch or stop (nil:
// none) is closed or ctx ends; it returns ctx's error if ctx ended.
func (b *backoff) pause(ctx context.Context, ch, stop <-chan struct{}, deadline time.Time) error {
	d := min(max(time.Until(deadline), 0), b.cur/2+rand.N(b.cur/2+1))
	b.cur = min(2*b.cur, b.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
	case <-stop:
	case <-t.C:
	}
	return nil
}
