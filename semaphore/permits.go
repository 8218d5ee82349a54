package semaphore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// Permit is one permit of a Permits: its slot, the owner id of the slot's lock, its
// fencing token (strictly increasing per slot: see Fencing tokens in the package doc),
// and when its lease ends by the store's clock, as the store last reported it (for
// display: this process's own view is Permits.Deadline).
type Permit struct {
	Slot    int
	Owner   string
	Token   uint64
	Expires time.Time
}

// Permits is a set of permits taken by one Acquire or TryAcquire. Its methods are safe
// for concurrent use.
type Permits struct {
	s     *Semaphore
	locks []*lock.Lock
	slots []int

	mu       sync.Mutex
	ka       context.Context // the running KeepAlive's context, nil if none
	kcancel  context.CancelCauseFunc
	released bool
}

func newPermits(s *Semaphore, locks []*lock.Lock, slots []int) *Permits {
	return &Permits{s: s, locks: locks, slots: slots}
}

// Permits returns the permits, in the order they were taken.
func (p *Permits) Permits() []Permit {
	out := make([]Permit, len(p.locks))
	for i, l := range p.locks {
		out[i] = Permit{Slot: p.slots[i], Owner: l.Owner(), Token: l.Token(), Expires: l.Expires()}
	}
	return out
}

// Len returns the number of permits.
func (p *Permits) Len() int { return len(p.locks) }

// TTL returns the permits' lease.
func (p *Permits) TTL() time.Duration { return p.locks[0].TTL() }

// Deadline returns the earliest Deadline of the permits' leases (see lock.Lock's
// Deadline): the set is held exactly at the instants before it.
func (p *Permits) Deadline() time.Time {
	d := p.locks[0].Deadline()
	for _, l := range p.locks[1:] {
		if dl := l.Deadline(); dl.Before(d) {
			d = dl
		}
	}
	return d
}

// Held reports whether every permit's lease still runs by this process's reckoning.
func (p *Permits) Held() bool {
	for _, l := range p.locks {
		if !l.Held() {
			return false
		}
	}
	return true
}

// KeepAlive renews the leases of every permit until Release, until ctx ends, or until
// one of them is lost, and returns a context derived from ctx that is cancelled the
// moment any permit's lease is lost: context.Cause then returns that permit's error,
// with code LockLost. Run the work the permits protect under that context. The renewals
// are lock.Lock's KeepAlive renewals, batched by the semaphore's lock.Manager with every
// other lease it keeps alive in one store call per interval. Calling it again while it
// runs returns the same context; Release ends it with cause context.Canceled.
func (p *Permits) KeepAlive(ctx context.Context) context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ka != nil && (p.ka.Err() == nil || errors.Is(context.Cause(p.ka), dcsync.ErrLockLost)) {
		return p.ka
	}
	kctx, cancel := context.WithCancelCause(ctx)
	p.ka, p.kcancel = kctx, cancel
	if p.released {
		cancel(driver.Errorf(dcsync.LockLost, "semaphore.KeepAlive", "permits of %s were released", p.s.name))
		return kctx
	}
	for _, l := range p.locks {
		lctx := l.KeepAlive(kctx)
		context.AfterFunc(lctx, func() {
			cause := context.Cause(lctx)
			if errors.Is(cause, dcsync.ErrLockLost) {
				wake(p.s.wk) // the slot is free, or soon will be
			}
			cancel(cause)
		})
	}
	return kctx
}

// Release gives every permit back, in one store call on a store that implements
// driver.LockMover, and ends a running KeepAlive. It returns LockLost when some permit
// was no longer held (its lease had ended; the others are freed all the same), and a
// Connection error when ctx ended while a renewal was still in a store call (those
// permits are left to expire). Acquirers waiting in this process look again at once.
func (p *Permits) Release(ctx context.Context) error {
	p.mu.Lock()
	p.released = true
	cancel := p.kcancel
	p.mu.Unlock()
	errs := p.s.m.locks.ReleaseMany(ctx, p.locks)
	wake(p.s.wk)
	if cancel != nil {
		cancel(context.Canceled)
	}
	var first error
	lost := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		if errors.Is(err, dcsync.ErrLockLost) {
			lost++
		}
		if first == nil {
			first = fmt.Errorf("permit slot %d: %w", p.slots[i], err)
		}
	}
	if first == nil {
		return nil
	}
	code := dcsync.CodeOf(first)
	return driver.Errorf(code, "semaphore.Release", "%s: %d of %d permits not released cleanly (%d lost): %w", p.s.name, countErrs(errs), len(errs), lost, first)
}

func countErrs(errs []error) int {
	n := 0
	for _, e := range errs {
		if e != nil {
			n++
		}
	}
	return n
}
