package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
)

// Lock is one acquisition of a lock. Its methods are safe for concurrent use.
type Lock struct {
	m     *Manager
	key   dcsync.Key
	ttl   time.Duration
	owner string
	token uint64

	mu       sync.Mutex
	expires  time.Time // by the store's clock
	deadline time.Time // by ours: when the last renewal was sent, plus the TTL
	released bool
	stop     context.CancelFunc // stops KeepAlive; nil when not running
	stopped  chan struct{}      // closed when KeepAlive's goroutine has exited
}

func newLock(m *Manager, k dcsync.Key, ttl time.Duration, st dcsync.LockState, sent time.Time) *Lock {
	return &Lock{m: m, key: k, ttl: ttl, owner: st.Owner, token: st.Token, expires: st.Expires, deadline: sent.Add(ttl)}
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

// Expires returns when the lease ends unless renewed, by the store's clock.
func (l *Lock) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Refresh renews the lease for another TTL. It returns LockLost when the lease has
// lapsed or another owner holds the lock, and changes nothing then.
func (l *Lock) Refresh(ctx context.Context) error {
	sent := time.Now()
	st, err := l.m.store.RefreshLock(ctx, l.key, l.owner, l.ttl)
	if err != nil {
		return dcsync.Wrap(err, dcsync.Internal, "lock.Refresh")
	}
	l.mu.Lock()
	l.expires, l.deadline = st.Expires, sent.Add(l.ttl)
	l.mu.Unlock()
	return nil
}

// Release stops KeepAlive and frees the lock. It returns LockLost, leaving the lock
// alone, when this acquisition no longer holds it.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	l.released = true
	stop, stopped := l.stop, l.stopped
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-stopped
	}
	return dcsync.Wrap(l.m.store.ReleaseLock(ctx, l.key, l.owner), dcsync.Internal, "lock.Release")
}

// errReleased is the cause of a KeepAlive context ended by Release.
var errReleased = errors.New("lock released")

// KeepAlive renews the lease every TTL/3 until Release, until ctx ends, or until the
// lease is lost. It returns a context derived from ctx that is cancelled the moment the
// lease is lost: context.Cause then returns an error with code LockLost. Run the work the
// lock protects under that context. A renewal that fails for a passing reason (a store
// outage) is retried until the lease would have run out by this process's clock; only
// then is the lease declared lost. Calling KeepAlive again while it runs returns the
// running one's context.
func (l *Lock) KeepAlive(ctx context.Context) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	kctx, cancel := context.WithCancelCause(ctx)
	if l.released {
		cancel(dcsync.Errorf(dcsync.LockLost, "lock.KeepAlive", "%s was released", l.key))
		return kctx
	}
	if l.stop != nil {
		cancel(errors.New("lock: KeepAlive is already running"))
		return kctx
	}
	loopCtx, stopLoop := context.WithCancel(kctx)
	l.stop = func() { stopLoop(); cancel(errReleased) }
	l.stopped = make(chan struct{})
	go l.keepAlive(loopCtx, cancel)
	return kctx
}

func (l *Lock) keepAlive(ctx context.Context, lost context.CancelCauseFunc) {
	defer close(l.stopped)
	every := l.ttl / 3
	retry := max(l.ttl/10, 100*time.Millisecond)
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		l.mu.Lock()
		deadline := l.deadline
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if !time.Now().Before(deadline) {
			lost(dcsync.Errorf(dcsync.LockLost, "lock.KeepAlive", "lease on %s ran out before it could be renewed", l.key))
			return
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		err := l.Refresh(rctx)
		cancel()
		switch {
		case err == nil:
			timer.Reset(every)
		case ctx.Err() != nil:
			return
		case errors.Is(err, dcsync.ErrLockLost):
			lost(err)
			return
		default:
			l.m.log.Warn("dcsync lock: renewal failed; retrying", "lock", l.key.String(), "err", err)
			timer.Reset(min(retry, max(time.Until(deadline), 0)))
		}
	}
}
