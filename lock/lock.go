// Package lock provides distributed locks with leases, fencing tokens and keep-alive on
// any dcsync store.
//
// A lock is held under a lease (TTL). Each acquisition gets an owner id and a fencing
// token that strictly increases per lock key, also across lease expiries, so a
// protected resource can refuse a stale holder. Refresh and Release act only for the
// owner: once the lease has lapsed they return LockLost and leave the next holder alone.
// KeepAlive renews the lease at a third of its TTL and tells the holder, through a
// context, the moment the lease is lost.
package lock

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/dcsync/dcsync"
)

// Defaults of a Manager, as in the Java lock manager.
const (
	DefaultTTL  = 90 * time.Second
	DefaultWait = 90 * time.Second
)

// Manager acquires locks for one client id in one farm, on one store. It is safe for
// concurrent use.
type Manager struct {
	store      dcsync.LockStore
	client     string
	farm       string
	level      dcsync.Level
	ttl        time.Duration
	wait       time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	log        *slog.Logger
}

// Option configures a Manager.
type Option func(*Manager)

// WithTTL sets the default lease (DefaultTTL if unset).
func WithTTL(ttl time.Duration) Option { return func(m *Manager) { m.ttl = ttl } }

// WithWait sets how long Acquire waits by default (DefaultWait if unset).
func WithWait(d time.Duration) Option { return func(m *Manager) { m.wait = d } }

// WithLevel sets the default level (DC if unset).
func WithLevel(l dcsync.Level) Option { return func(m *Manager) { m.level = l } }

// WithBackoff sets the bounds of Acquire's jittered exponential backoff between tries
// (10ms and 1s if unset).
func WithBackoff(min, max time.Duration) Option {
	return func(m *Manager) { m.minBackoff, m.maxBackoff = min, max }
}

// WithLogger sets the logger (slog.Default() if unset).
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// New returns a Manager for the given client and farm ids. It validates its input and
// does no I/O.
func New(store dcsync.LockStore, client, farm string, opts ...Option) (*Manager, error) {
	m := &Manager{store: store, client: client, farm: farm, level: dcsync.DC, ttl: DefaultTTL,
		wait: DefaultWait, minBackoff: 10 * time.Millisecond, maxBackoff: time.Second, log: slog.Default()}
	for _, o := range opts {
		o(m)
	}
	if store == nil {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "lock.New", "store is nil")
	}
	if err := dcsync.ValidateID("client", client); err != nil {
		return nil, err
	}
	if err := dcsync.ValidateID("farm", farm); err != nil {
		return nil, err
	}
	if m.level != dcsync.DC && m.level != dcsync.XDC {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "lock.New", "level %d is not DC or XDC", int(m.level))
	}
	if err := dcsync.ValidateTTL(m.ttl); err != nil {
		return nil, err
	}
	if m.wait < 0 || m.minBackoff <= 0 || m.maxBackoff < m.minBackoff {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "lock.New", "wait %v and backoff [%v, %v] must be positive and ordered", m.wait, m.minBackoff, m.maxBackoff)
	}
	return m, nil
}

// CallOption sets the level, TTL or wait of one call, overriding the manager's defaults.
type CallOption func(*spec)

type spec struct {
	level dcsync.Level
	ttl   time.Duration
	wait  time.Duration
}

// Level sets the lock's level.
func Level(l dcsync.Level) CallOption { return func(s *spec) { s.level = l } }

// TTL sets the lease.
func TTL(ttl time.Duration) CallOption { return func(s *spec) { s.ttl = ttl } }

// Wait sets how long Acquire waits; 0 means try once.
func Wait(d time.Duration) CallOption { return func(s *spec) { s.wait = d } }

func (m *Manager) spec(name string, opts []CallOption) (dcsync.Key, spec, error) {
	s := spec{level: m.level, ttl: m.ttl, wait: m.wait}
	for _, o := range opts {
		o(&s)
	}
	k := dcsync.Key{Level: s.level, Client: m.client, Farm: m.farm, Name: name}
	if err := k.Validate("lock"); err != nil {
		return k, s, err
	}
	if err := dcsync.ValidateTTL(s.ttl); err != nil {
		return k, s, err
	}
	if s.wait < 0 {
		return k, s, dcsync.Errorf(dcsync.InvalidArgument, "lock.Acquire", "wait %v is negative", s.wait)
	}
	return k, s, nil
}

// newOwner returns a fresh random owner id (128 bits, hex).
func newOwner() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (m *Manager) try(ctx context.Context, k dcsync.Key, ttl time.Duration) (*Lock, error) {
	owner := newOwner()
	sent := time.Now()
	st, err := m.store.AcquireLock(ctx, k, owner, ttl)
	if err != nil {
		return nil, dcsync.Wrap(err, dcsync.Internal, "lock.Acquire")
	}
	return newLock(m, k, ttl, st, sent), nil
}

// TryAcquire takes the lock if it is free and fails at once, with LockUnavailable,
// when someone holds it.
func (m *Manager) TryAcquire(ctx context.Context, name string, opts ...CallOption) (*Lock, error) {
	k, s, err := m.spec(name, opts)
	if err != nil {
		return nil, err
	}
	return m.try(ctx, k, s.ttl)
}

// Acquire takes the lock, retrying with jittered exponential backoff while it is held,
// for at most the wait (DefaultWait unless set) and while ctx lasts. When the wait runs
// out it returns LockUnavailable; when ctx ends it returns an error with code
// LockUnavailable that also matches ctx's error with errors.Is.
func (m *Manager) Acquire(ctx context.Context, name string, opts ...CallOption) (*Lock, error) {
	k, s, err := m.spec(name, opts)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(s.wait)
	backoff := m.minBackoff
	gaveUp := func(cause error) error {
		return &dcsync.Error{Code: dcsync.LockUnavailable, Op: "lock.Acquire",
			Msg: k.String() + " is held; gave up waiting", Err: cause}
	}
	for {
		l, err := m.try(ctx, k, s.ttl)
		if err != nil && ctx.Err() != nil {
			// ctx ended, maybe in the middle of a store call: that is the end of
			// the wait, whatever error the store gave on the way out.
			return nil, gaveUp(errors.Join(ctx.Err(), err))
		}
		if err == nil || !errors.Is(err, dcsync.ErrLockUnavailable) {
			return l, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, err
		}
		sleep := min(left, backoff/2+rand.N(backoff/2+1))
		backoff = min(2*backoff, m.maxBackoff)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, gaveUp(ctx.Err())
		case <-t.C:
		}
	}
}

// Inspect returns the state of the lock's holder, or NotFound when it is free.
func (m *Manager) Inspect(ctx context.Context, name string, opts ...CallOption) (dcsync.LockState, error) {
	k, _, err := m.spec(name, opts)
	if err != nil {
		return dcsync.LockState{}, err
	}
	st, err := m.store.InspectLock(ctx, k)
	return st, dcsync.Wrap(err, dcsync.Internal, "lock.Inspect")
}

// Release frees the lock held by owner (an id from Lock.Owner, say from another
// process). It returns LockLost, and changes nothing, when owner does not hold it.
func (m *Manager) Release(ctx context.Context, name, owner string, opts ...CallOption) error {
	k, _, err := m.spec(name, opts)
	if err != nil {
		return err
	}
	if err := dcsync.ValidateOwner(owner); err != nil {
		return err
	}
	return dcsync.Wrap(m.store.ReleaseLock(ctx, k, owner), dcsync.Internal, "lock.Release")
}
