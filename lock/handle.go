package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/telemetry"
)

// stamp is one reading of this process's two clocks: mono on the monotonic clock (from
// an arbitrary origin), wall on the wall clock, and at the reading itself as a time.Time
// (with its monotonic reading, on the system clock), so that an instant derived from the
// stamp (Deadline) compares with later readings exactly as the stamp does.
type stamp struct {
	mono time.Duration
	wall time.Time
	at   time.Time
}

// stopper stops a timer made by clock.afterFunc.
type stopper interface{ Stop() bool }

// clock is where a Lock reads time and sets timers; tests replace it.
type clock interface {
	now() stamp
	afterFunc(d time.Duration, f func()) stopper
	// withTimeout bounds a store call by d on this clock.
	withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// origin is the zero of sysClock's monotonic readings.
var origin = time.Now()

type sysClock struct{}

func (sysClock) now() stamp {
	t := time.Now()
	return stamp{mono: t.Sub(origin), wall: t.Round(0), at: t} // Round(0) strips the monotonic reading
}

func (sysClock) afterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

func (sysClock) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// Lock is one acquisition of a lock. Its methods are safe for concurrent use.
type Lock struct {
	m     *Manager
	key   dcsync.Key
	ttl   time.Duration
	lease time.Duration // ttl minus the safety margin: how long after a send the lease counts
	owner string
	token uint64
	fair  bool   // taken by a fair Acquire; set before the Lock is returned
	batch uint64 // its batch (see waiters.go); set before the Lock is returned

	mu       sync.Mutex
	expires  time.Time // by the store's clock; reported, never used for the deadline
	sent     stamp     // when the acquisition or the latest successful refresh was sent
	lost     error     // why the lease was declared lost (LockLost), nil while held
	released bool
	ended    bool      // the lease was declared lost or released: it ended at end
	end      stamp     // when it ended, if ended
	ka       *keeper   // the latest KeepAlive, nil if none was started
	renewing *renewal  // the renewal round out with this lease, nil if none
	idleWait []*keeper // halted KeepAlives whose done closes when renewing comes back
}

func newLock(m *Manager, k dcsync.Key, ttl time.Duration, st driver.LockState, sent stamp) *Lock {
	return &Lock{m: m, key: k, ttl: ttl, lease: ttl - m.safety(ttl), owner: st.Owner, token: st.Token,
		expires: st.Expires, sent: sent}
}

// Key returns the lock's key in the store.
func (l *Lock) Key() dcsync.Key { return l.key }

// Owner returns the acquisition's owner id.
func (l *Lock) Owner() string { return l.owner }

// Token returns the fencing token: it is greater than the token of every earlier
// acquisition of this lock key. Pass it to the resource the lock protects, and have
// the resource refuse tokens lower than the highest it has seen.
func (l *Lock) Token() uint64 { return l.token }

// TTL returns the lease length.
func (l *Lock) TTL() time.Duration { return l.ttl }

// Expires returns when the lease ends unless renewed, by the store's clock, as the store
// reported it. It is for display: this process's own view is Deadline.
func (l *Lock) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Deadline returns when this process treats the lease as over unless it is renewed:
// TTL minus the safety margin after the acquisition or the latest successful Refresh
// was sent (see the package doc), earlier if this host's wall clock has stepped forward
// since. Once the lease has been declared lost or released, Deadline returns the
// instant that happened (in the past). The time carries a monotonic clock reading, so
// time.Until and context.WithDeadline measure it unaffected by later wall-clock steps.
//
// The lease is held at an instant t exactly when t is before Deadline: at Deadline and
// after it is over, and stays over (a Refresh or a renewal that completes later does
// not bring it back). KeepAlive, Refresh and Held judge by the same rule, from one
// clock reading each. Work that must finish while the lock is held should end before
// Deadline; KeepAlive's context ends at it.
func (l *Lock) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.m.clk.now()
	// One reading: the result is now.at plus what is left at now.at, so a later
	// reading is at or past the result exactly when expiredLocked says so for it.
	return now.at.Add(l.leftLocked(now))
}

// Held reports whether the lease still runs now by this process's reckoning: false
// once Deadline has passed, the lease was declared lost, or the Lock was released. It
// asks no store; it is the test KeepAlive, Refresh and Deadline apply, at the instant
// of the call.
func (l *Lock) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.expiredLocked(l.m.clk.now())
}

// leftAt returns how much of the lease renewed at sent is left at now: the smaller of
// what the monotonic clock and the wall clock say. It is <= 0 once the lease is over.
func (l *Lock) leftAt(sent, now stamp) time.Duration {
	return min(sent.mono+l.lease-now.mono, sent.wall.Add(l.lease).Sub(now.wall))
}

// leftLocked returns how much of the lease is left at now: leftAt the latest send, and
// nothing once the lease has ended (lost or released). now must have been read with
// l.mu held, so that it is not earlier than an end recorded before it. l.mu must be held.
func (l *Lock) leftLocked(now stamp) time.Duration {
	left := l.leftAt(l.sent, now)
	if l.ended {
		left = min(left, l.end.mono-now.mono)
	}
	return left
}

// expiredLocked is the one rule by which every path of this package decides which side
// of the deadline an instant is on: the lease is over at now when nothing of it is
// left (so at the deadline itself it is over). l.mu must be held.
func (l *Lock) expiredLocked(now stamp) bool { return l.leftLocked(now) <= 0 }

// endLocked records that the lease ended at now, unless it had ended before. l.mu must
// be held.
func (l *Lock) endLocked(now stamp) {
	if !l.ended {
		l.ended, l.end = true, now
	}
}

// errRanOut is the cause given when the lease's deadline passed before a renewal.
func (l *Lock) errRanOut() error {
	return driver.Errorf(dcsync.LockLost, "lock.KeepAlive", "lease on %s ran out (TTL %v less the safety margin) before it could be renewed", l.key, l.ttl)
}

// Refresh renews the lease for another TTL. It returns LockLost when the lease has
// lapsed or another owner holds the lock, and changes nothing then. It returns
// LockLost without asking the store once the lease is over by this process's clock
// (Deadline has passed: the lease ends there, declared lost as KeepAlive would), after
// Release, and once KeepAlive has declared the lease lost (the protected work was told
// to stop: acquire the lock again instead). A renewal extends the lease only if its
// reply comes before Deadline; one that comes later returns LockLost. A LockLost ends a
// running KeepAlive's context too.
func (l *Lock) Refresh(ctx context.Context) (err error) {
	ctx, span := l.m.tel.Start(ctx, "lock.refresh", l.key)
	defer func() { telemetry.End(span, err) }()
	l.mu.Lock()
	lost, released := l.lost, l.released
	sent := l.m.clk.now()
	expired := l.expiredLocked(sent)
	l.mu.Unlock()
	switch {
	case lost != nil:
		return lost
	case released:
		return driver.Errorf(dcsync.LockLost, "lock.Refresh", "%s was released", l.key)
	case expired:
		err := l.errRanOut()
		l.lose(err)
		return l.lostCause(err)
	}
	start := time.Now()
	st, err := l.m.store.RefreshLock(ctx, l.key, l.owner, l.ttl)
	l.m.tel.StoreCall(ctx, "refresh_lock", start, err)
	l.m.tel.Renewed(ctx, l.key.Level, start, err)
	if err != nil {
		err = driver.Wrap(err, dcsync.Internal, "lock.Refresh")
		if errors.Is(err, dcsync.ErrLockLost) {
			l.lose(err)
		}
		return err
	}
	return l.applyRenewal("lock.Refresh", sent, st)
}

// applyRenewal applies a successful renewal sent at sent (by Refresh, or by a KeepAlive
// round) whose store call returned st: the lease is extended only if the reply came
// before the deadline and the lease was neither declared lost nor released meanwhile;
// otherwise it returns LockLost.
func (l *Lock) applyRenewal(op string, sent stamp, st driver.LockState) error {
	l.mu.Lock()
	if l.lost != nil {
		// KeepAlive gave the lease up while this call was out: the work was told to
		// stop, and a late success does not bring the lease back.
		defer l.mu.Unlock()
		return l.lost
	}
	if l.released {
		defer l.mu.Unlock()
		return driver.Errorf(dcsync.LockLost, op, "%s was released while the refresh was out", l.key)
	}
	if l.expiredLocked(l.m.clk.now()) {
		// The deadline passed while this call was out: the lease is over, and a late
		// success does not bring it back.
		l.mu.Unlock()
		err := l.errRanOut()
		l.lose(err)
		return l.lostCause(err)
	}
	defer l.mu.Unlock()
	l.expires = st.Expires
	if sent.mono > l.sent.mono {
		// Only a later send extends the deadline: of two overlapping refreshes the
		// one sent later also reached the store later or not at all.
		l.sent = sent
	}
	return nil
}

// lostCause returns the cause the lease was declared lost with (err, or an earlier
// one), or err if none was (the Lock was released meanwhile).
func (l *Lock) lostCause(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	return err
}

// Release stops KeepAlive and frees the lock. It returns LockLost, leaving the lock
// alone, when this acquisition no longer holds it. When KeepAlive had already declared
// the lease lost (its deadline passed), Release still deletes the lock if the store has
// it, so others need not wait for the lease to end, and returns LockLost all the same:
// the protected work outlived the lease this process could vouch for. When ctx ends
// while a KeepAlive renewal is still in a store call, Release returns a Connection error
// matching ctx's error and leaves the lock to expire. That call renews the leases of
// other KeepAlives of the Manager too: it is cancelled once all of them have stopped.
func (l *Lock) Release(ctx context.Context) (err error) {
	ctx, span := l.m.tel.Start(ctx, "lock.release", l.key)
	defer func() { telemetry.End(span, err) }()
	if err := l.stopForRelease(ctx); err != nil {
		return err
	}
	start := time.Now()
	err = l.m.store.ReleaseLock(ctx, l.key, l.owner)
	l.m.tel.StoreCall(ctx, "release_lock", start, err)
	return l.releasedWith(err)
}

// stopForRelease marks l released and stops its KeepAlive, waiting for a renewal round
// out with it; it returns a Connection error if ctx ends first (the lock is then left
// to expire).
func (l *Lock) stopForRelease(ctx context.Context) error {
	l.mu.Lock()
	l.released = true
	l.endLocked(l.m.clk.now())
	k := l.ka
	l.mu.Unlock()
	if k != nil {
		k.cancel(nil)
		k.halt()
		select {
		case <-k.done:
		case <-ctx.Done():
			return driver.Errorf(dcsync.Connection, "lock.Release", "%s: keep-alive still in a store call: %w", l.key, ctx.Err())
		}
	}
	return nil
}

// releasedWith takes the store's answer to the release of l (err) and returns Release's.
func (l *Lock) releasedWith(err error) error {
	err = driver.Wrap(err, dcsync.Internal, "lock.Release")
	if err == nil || errors.Is(err, dcsync.ErrLockLost) {
		// Freed now, or earlier when the lease lapsed: acquirers waiting in this
		// process look again at once.
		l.m.freed(l.key, l)
	}
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if err == nil && lost != nil {
		return driver.Errorf(dcsync.LockLost, "lock.Release", "deleted %s, but its lease had been given up before Release: %w", l.key, lost)
	}
	return err
}

// keeper is one run of KeepAlive, scheduled by its Manager's renewer.
type keeper struct {
	l      *Lock
	r      *renewer        // nil for a run that was over when it started
	ctx    context.Context // what KeepAlive returns
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once halted and no renewal round of l is out

	// Guarded by l.mu.
	halted   bool          // out of the schedule: its context has ended
	unhook   func() bool   // stops the context.AfterFunc that halts it
	failed   bool          // the latest renewal failed for a passing reason
	failedAt time.Duration // the lease's send time (monotonic) when it failed
	retryAt  time.Duration // when to retry it (monotonic)
	batch    *renewal      // the round out with it, nil if none
}

// KeepAlive renews the lease until Release, until ctx ends, or until the lease is lost,
// and returns a context derived from ctx that is cancelled the moment the lease is
// lost: context.Cause then returns an error with code LockLost. Run the work the lock
// protects under that context.
//
// Renewals are scheduled against the lease's deadline (see the package doc), not
// against the call: the first one is sent at once when KeepAlive starts after a third
// of the lease has passed. The KeepAlives of one Manager are renewed together: one
// scheduler per Manager renews every lease that is due, and those due within the next
// half of their renewal interval, in one store call (one batch on a store that
// implements driver.LockBatcher), so that a process holding any number of locks makes
// one renewal call per interval. A renewal that fails for a passing reason (a store
// outage) is retried until the deadline. The lease is declared lost at the deadline by
// the scheduler's timer, whether or not a renewal is still waiting on the store, and at
// once when the store answers LockLost for it; the other leases of the call are not
// affected.
//
// Called at or after Deadline (the lease is over), KeepAlive declares the lease lost
// then and there and returns a context already cancelled with a LockLost cause: it
// never returns a live context for a lease that is over.
//
// Calling KeepAlive again while a KeepAlive runs, or after it declared the lease lost,
// returns that same context (ctx of the later call is not used). After Release it
// returns a context already cancelled with a LockLost cause; Release itself ends a
// running KeepAlive's context with cause context.Canceled. When the context ended only
// because its ctx ended, a new call starts a new KeepAlive.
func (l *Lock) KeepAlive(ctx context.Context) context.Context {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		kctx, cancel := context.WithCancelCause(ctx)
		cancel(driver.Errorf(dcsync.LockLost, "lock.KeepAlive", "%s was released", l.key))
		return kctx
	}
	if l.lost == nil && l.expiredLocked(l.m.clk.now()) {
		// Over already: the scheduler may not have looked at a running KeepAlive yet,
		// and would look at a new one only after this call returned. Declare it here.
		l.mu.Unlock()
		l.lose(l.errRanOut())
		l.mu.Lock()
	}
	prev := l.ka
	if prev != nil && (prev.ctx.Err() == nil || l.lost != nil) {
		l.mu.Unlock()
		return prev.ctx
	}
	kctx, cancel := context.WithCancelCause(ctx)
	k := &keeper{l: l, ctx: kctx, cancel: cancel, done: make(chan struct{})}
	l.ka = k
	if l.lost != nil {
		// Declared lost before any KeepAlive ran (by this call, Refresh, or a store's
		// LockLost): later calls return this same context.
		cancel(l.lost)
		k.halted = true
		close(k.done)
		l.mu.Unlock()
		return kctx
	}
	k.r = l.m.renewer()
	l.mu.Unlock()
	k.r.add(k)
	unhook := context.AfterFunc(kctx, k.halt) // ctx ended, Release, or the lease lost
	l.mu.Lock()
	halted := k.halted
	k.unhook = unhook
	l.mu.Unlock()
	if halted {
		unhook()
	}
	return kctx
}

// lose declares the lease lost with cause err (code LockLost) and ends a running
// KeepAlive's context with it. The first cause stays. Acquirers waiting in this process
// look at the store again at once: the store has freed the lock, or frees it within the
// safety margin (their next poll finds it free then).
func (l *Lock) lose(err error) {
	l.mu.Lock()
	first := l.lost == nil && !l.released
	if first {
		l.lost = err
		l.endLocked(l.m.clk.now())
	}
	k := l.ka
	l.mu.Unlock()
	if k != nil {
		k.cancel(err)
		k.halt()
	}
	if first {
		l.m.tel.LeaseLost(context.Background(), l.key.Level)
		l.m.log.Warn("dcsync lock: lease lost", telemetry.LogStore, l.m.tel.Store, telemetry.LogOperation, "lock.keep_alive",
			telemetry.LogKey, l.key.String(), telemetry.LogOwner, l.owner, telemetry.LogToken, l.token, telemetry.LogErr, err)
		l.m.freed(l.key, l)
	}
}
