// Package latch provides distributed count-down and count-up-down latches on any
// dcsync store.
//
// A latch is a count set once and then decremented (and, for a count-up-down latch,
// incremented) by any process; waiters return once the count is zero or below. At level
// DC a latch's count is the caller's farm cell; at level XDC updates still write the
// caller's farm cell and reads sum every farm's cell.
//
// Unlike the Java library it is ported from, creating an existing latch fails with
// AlreadyExists instead of adding to its count, updating or awaiting a latch that does
// not exist fails with NotFound, and all waits in a process share one watcher per store,
// which batches the reads of every awaited latch into one store call per poll interval,
// stops when nobody waits, and wakes waiters at once when a local update reaches zero.
package latch

import (
	"context"
	"log/slog"
	"time"

	"github.com/dcsync/dcsync"
)

// Defaults of a Manager.
const (
	// DefaultTTL is how long a latch lives after its last update.
	DefaultTTL = time.Hour
	// DefaultPollInterval is how often the shared watcher reads awaited latches.
	DefaultPollInterval = time.Second
)

// Manager creates and opens latches of one client id in one farm, on one store. It is
// safe for concurrent use; create one per (store, client, farm).
type Manager struct {
	store    dcsync.LatchStore
	client   string
	farm     string
	level    dcsync.Level
	ttl      time.Duration
	interval time.Duration
	log      *slog.Logger
	watch    *watcher
}

// Option configures a Manager.
type Option func(*Manager)

// WithTTL sets the default TTL of latches (DefaultTTL if unset). The TTL is renewed on
// every update.
func WithTTL(ttl time.Duration) Option { return func(m *Manager) { m.ttl = ttl } }

// WithLevel sets the default level of latches (DC if unset).
func WithLevel(l dcsync.Level) Option { return func(m *Manager) { m.level = l } }

// WithPollInterval sets how often the shared watcher reads the latches this manager's
// waiters await (DefaultPollInterval if unset). When managers with different intervals
// share a store, the watcher polls at the shortest interval among current waiters.
func WithPollInterval(d time.Duration) Option { return func(m *Manager) { m.interval = d } }

// WithLogger sets the logger (slog.Default() if unset).
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// New returns a Manager for the given client and farm ids. It validates its input and
// does no I/O.
func New(store dcsync.LatchStore, client, farm string, opts ...Option) (*Manager, error) {
	m := &Manager{store: store, client: client, farm: farm, level: dcsync.DC,
		ttl: DefaultTTL, interval: DefaultPollInterval, log: slog.Default()}
	for _, o := range opts {
		o(m)
	}
	if store == nil {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "latch.New", "store is nil")
	}
	if err := dcsync.ValidateID("client", client); err != nil {
		return nil, err
	}
	if err := dcsync.ValidateID("farm", farm); err != nil {
		return nil, err
	}
	if m.level != dcsync.DC && m.level != dcsync.XDC {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "latch.New", "level %d is not DC or XDC", int(m.level))
	}
	if err := dcsync.ValidateTTL(m.ttl); err != nil {
		return nil, err
	}
	if m.interval < time.Millisecond {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "latch.New", "poll interval %v is shorter than 1ms", m.interval)
	}
	m.watch = watcherFor(store, m.log)
	return m, nil
}

// CallOption sets the level or TTL of one latch, overriding the manager's defaults.
type CallOption func(*spec)

type spec struct {
	level dcsync.Level
	ttl   time.Duration
}

// Level sets the latch's level.
func Level(l dcsync.Level) CallOption { return func(s *spec) { s.level = l } }

// TTL sets the latch's TTL.
func TTL(ttl time.Duration) CallOption { return func(s *spec) { s.ttl = ttl } }

func (m *Manager) open(name string, opts []CallOption) (*CountDownLatch, error) {
	s := spec{level: m.level, ttl: m.ttl}
	for _, o := range opts {
		o(&s)
	}
	l := &CountDownLatch{m: m, key: dcsync.Key{Level: s.level, Client: m.client, Farm: m.farm, Name: name}, ttl: s.ttl}
	if err := dcsync.CheckLatch(l.key, 0); err != nil {
		return nil, err
	}
	if err := dcsync.ValidateTTL(l.ttl); err != nil {
		return nil, err
	}
	return l, nil
}

func (m *Manager) create(ctx context.Context, name string, count int64, opts []CallOption) (*CountDownLatch, error) {
	l, err := m.open(name, opts)
	if err != nil {
		return nil, err
	}
	if err := dcsync.ValidateCount(count); err != nil {
		return nil, err
	}
	if err := m.store.CreateLatch(ctx, l.key, count, l.ttl); err != nil {
		return nil, dcsync.Wrap(err, dcsync.Internal, "latch.Create")
	}
	return l, nil
}

// CreateCountDown creates a count-down latch with the given count (>= 0). It fails with
// AlreadyExists, leaving the stored count alone, if the latch exists.
func (m *Manager) CreateCountDown(ctx context.Context, name string, count int64, opts ...CallOption) (*CountDownLatch, error) {
	return m.create(ctx, name, count, opts)
}

// CreateCountUpDown creates a count-up-down latch with the given count (>= 0). It fails
// with AlreadyExists, leaving the stored count alone, if the latch exists.
func (m *Manager) CreateCountUpDown(ctx context.Context, name string, count int64, opts ...CallOption) (*CountUpDownLatch, error) {
	l, err := m.create(ctx, name, count, opts)
	if err != nil {
		return nil, err
	}
	return &CountUpDownLatch{*l}, nil
}

// GetCountDown returns a reference to an existing count-down latch. It does no I/O;
// operations on a latch that does not exist fail with NotFound.
func (m *Manager) GetCountDown(name string, opts ...CallOption) (*CountDownLatch, error) {
	return m.open(name, opts)
}

// GetCountUpDown returns a reference to an existing count-up-down latch. It does no
// I/O; operations on a latch that does not exist fail with NotFound.
func (m *Manager) GetCountUpDown(name string, opts ...CallOption) (*CountUpDownLatch, error) {
	l, err := m.open(name, opts)
	if err != nil {
		return nil, err
	}
	return &CountUpDownLatch{*l}, nil
}

// GetOrCreateCountUpDown returns a count-up-down latch, creating it with count 0 if it
// does not exist; an existing latch's count is left untouched.
func (m *Manager) GetOrCreateCountUpDown(ctx context.Context, name string, opts ...CallOption) (*CountUpDownLatch, error) {
	l, err := m.open(name, opts)
	if err != nil {
		return nil, err
	}
	if _, err := m.store.EnsureLatch(ctx, l.key, l.ttl); err != nil {
		return nil, dcsync.Wrap(err, dcsync.Internal, "latch.GetOrCreate")
	}
	return &CountUpDownLatch{*l}, nil
}

// CountDownLatch is a count-down latch. Its methods are safe for concurrent use, and any
// number of goroutines may Wait on one CountDownLatch at once.
type CountDownLatch struct {
	m   *Manager
	key dcsync.Key
	ttl time.Duration
}

// Key returns the latch's key in the store.
func (l *CountDownLatch) Key() dcsync.Key { return l.key }

// Count reads the count: the caller's farm cell at level DC, the sum of all farm cells
// at level XDC. It fails with NotFound if the latch does not exist.
func (l *CountDownLatch) Count(ctx context.Context) (int64, error) {
	res, err := l.m.store.ReadLatches(ctx, []dcsync.Key{l.key})
	if err != nil {
		return 0, dcsync.Wrap(err, dcsync.Internal, "latch.Count")
	}
	if len(res) != 1 {
		return 0, dcsync.Errorf(dcsync.Internal, "latch.Count", "store returned %d results for 1 key", len(res))
	}
	if !res[0].Found {
		return 0, dcsync.Errorf(dcsync.NotFound, "latch.Count", "latch %s does not exist", l.key)
	}
	return res[0].Count, nil
}

func (l *CountDownLatch) add(ctx context.Context, op string, delta int64) (int64, error) {
	n, err := l.m.store.AddLatch(ctx, l.key, delta)
	if err != nil {
		return 0, dcsync.Wrap(err, dcsync.Internal, op)
	}
	if n <= 0 {
		l.m.watch.reached(l.key)
	}
	return n, nil
}

// CountDown decrements the count by one and returns the count after the update (at the
// latch's level). It fails with NotFound, writing nothing, if the latch does not exist.
// The count may go below zero. When the returned count is zero or less, waiters in this
// process are woken at once.
func (l *CountDownLatch) CountDown(ctx context.Context) (int64, error) {
	return l.add(ctx, "latch.CountDown", -1)
}

// Wait blocks until the count is zero or less, and returns nil then. It returns an
// error with code NotFound if the latch does not exist (or expires while waited on), and
// ctx's error when ctx ends first.
func (l *CountDownLatch) Wait(ctx context.Context) error {
	return l.m.watch.wait(ctx, l.key, l.m.interval)
}

// CountUpDownLatch is a count-up-down latch: a CountDownLatch whose count may also go up.
type CountUpDownLatch struct {
	CountDownLatch
}

// CountUp increments the count by one and returns the count after the update. It fails
// with NotFound, writing nothing, if the latch does not exist.
func (l *CountUpDownLatch) CountUp(ctx context.Context) (int64, error) {
	return l.add(ctx, "latch.CountUp", 1)
}
