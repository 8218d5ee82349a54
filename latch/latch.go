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
//
// # The watcher
//
// A Wait returns only on what was observed after it began: a read the watcher started
// after the Wait joined, or a local update started after it. The watcher reads at most
// once per poll interval (the shortest interval among current waiters), however many
// waiters arrive or leave; a new Wait is therefore answered by the next scheduled read,
// up to one interval later, and leaving never causes a read. When a batched read fails
// for good (any code but Connection or RetriesExhausted), the watcher reads the latches
// one by one, and only the waiters of a latch that cannot be read get its error; on an
// outage (Connection, RetriesExhausted) every waiter keeps waiting, bounded by its ctx.
//
// A store may report its Close by a method Done() <-chan struct{} whose channel Close
// closes: every Wait on it then ends at once with a Connection error, and the watcher
// forgets the store. A store without it is seen closed only through its reads failing.
//
// # Counts
//
// Counts are int64. Updates change a count by one; a store must refuse, with
// InvalidArgument and writing nothing, an update whose result (the farm cell, or the sum
// at level XDC) would leave the int64 range. Should a store wrap instead, the latch
// notices from the count it returns, undoes the update and returns InvalidArgument.
package latch

import (
	"context"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/telemetry"
)

// Defaults of a Manager.
const (
	// DefaultTTL is how long a latch lives after its creation.
	DefaultTTL = time.Hour
	// DefaultPollInterval is how often the shared watcher reads awaited latches.
	DefaultPollInterval = time.Second
)

// Manager creates and opens latches of one client id in one farm, on one store. It is
// safe for concurrent use; create one per (store, client, farm).
type Manager struct {
	store    driver.LatchStore
	client   string
	farm     string
	level    dcsync.Level
	ttl      time.Duration
	interval time.Duration
	log      *slog.Logger
	own      *watcher // for a store that cannot key the shared watcher map; else nil
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	tel      telemetry.Scope
}

// Option configures a Manager.
type Option func(*Manager)

// WithTTL sets the default TTL of latches (DefaultTTL if unset). A latch ends TTL after
// its creation; updates never move that end.
func WithTTL(ttl time.Duration) Option { return func(m *Manager) { m.ttl = ttl } }

// WithLevel sets the default level of latches (DC if unset).
func WithLevel(l dcsync.Level) Option { return func(m *Manager) { m.level = l } }

// WithPollInterval sets how often the shared watcher reads the latches this manager's
// waiters await (DefaultPollInterval if unset). When managers with different intervals
// share a store, the watcher polls at the shortest interval among current waiters. It
// never reads more often, however many waiters come and go.
func WithPollInterval(d time.Duration) Option { return func(m *Manager) { m.interval = d } }

// WithLogger sets the logger (slog.Default() if unset).
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithMeterProvider sets the OpenTelemetry meter provider the manager records its
// metrics with (otel.GetMeterProvider() if unset; see package telemetry). The shared
// watcher of a store records with the providers of the manager whose Wait started it.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(m *Manager) { m.mp = mp } }

// WithTracerProvider sets the OpenTelemetry tracer provider the manager records its
// spans with (otel.GetTracerProvider() if unset; see package telemetry).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(m *Manager) { m.tp = tp } }

// New returns a Manager for the given client and farm ids. It validates its input and
// does no I/O.
func New(store driver.LatchStore, client, farm string, opts ...Option) (*Manager, error) {
	m := &Manager{store: store, client: client, farm: farm, level: dcsync.DC,
		ttl: DefaultTTL, interval: DefaultPollInterval, log: slog.Default()}
	for _, o := range opts {
		o(m)
	}
	if store == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, "latch.New", "store is nil")
	}
	if err := driver.ValidateID("client", client); err != nil {
		return nil, err
	}
	if err := driver.ValidateID("farm", farm); err != nil {
		return nil, err
	}
	if m.level != dcsync.DC && m.level != dcsync.XDC {
		return nil, driver.Errorf(dcsync.InvalidArgument, "latch.New", "level %d is not DC or XDC", int(m.level))
	}
	if err := driver.ValidateTTL(m.ttl); err != nil {
		return nil, err
	}
	if m.interval < time.Millisecond {
		return nil, driver.Errorf(dcsync.InvalidArgument, "latch.New", "poll interval %v is shorter than 1ms", m.interval)
	}
	m.tel = telemetry.NewScope(store, m.mp, m.tp)
	if !shareable(store) {
		m.own = newWatcher(store, m.log, m.tel)
	}
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
	if err := driver.CheckLatch(l.key, 0); err != nil {
		return nil, err
	}
	if err := driver.ValidateTTL(l.ttl); err != nil {
		return nil, err
	}
	return l, nil
}

func (m *Manager) create(ctx context.Context, name string, count int64, opts []CallOption) (l *CountDownLatch, err error) {
	ctx, span := m.tel.Start(ctx, "latch.create", m.keyOf(name, opts))
	defer func() { telemetry.End(span, err) }()
	l, err = m.open(name, opts)
	if err != nil {
		return nil, err
	}
	if err := driver.ValidateCount(count); err != nil {
		return nil, err
	}
	start := time.Now()
	err = m.store.CreateLatch(ctx, l.key, count, l.ttl)
	m.tel.StoreCall(ctx, "create_latch", start, err)
	if err != nil {
		return nil, driver.Wrap(err, dcsync.Internal, "latch.Create")
	}
	return l, nil
}

// keyOf returns the key of latch name with opts, valid or not (for spans).
func (m *Manager) keyOf(name string, opts []CallOption) dcsync.Key {
	s := spec{level: m.level, ttl: m.ttl}
	for _, o := range opts {
		o(&s)
	}
	return dcsync.Key{Level: s.level, Client: m.client, Farm: m.farm, Name: name}
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
func (m *Manager) GetOrCreateCountUpDown(ctx context.Context, name string, opts ...CallOption) (_ *CountUpDownLatch, err error) {
	ctx, span := m.tel.Start(ctx, "latch.get_or_create", m.keyOf(name, opts))
	defer func() { telemetry.End(span, err) }()
	l, err := m.open(name, opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	_, err = m.store.EnsureLatch(ctx, l.key, l.ttl)
	m.tel.StoreCall(ctx, "ensure_latch", start, err)
	if err != nil {
		return nil, driver.Wrap(err, dcsync.Internal, "latch.GetOrCreate")
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
	start := time.Now()
	res, err := l.m.store.ReadLatches(ctx, []dcsync.Key{l.key})
	l.m.tel.StoreCall(ctx, "read_latches", start, err)
	if err != nil {
		return 0, driver.Wrap(err, dcsync.Internal, "latch.Count")
	}
	if len(res) != 1 {
		return 0, driver.Errorf(dcsync.Internal, "latch.Count", "store returned %d results for 1 key", len(res))
	}
	if !res[0].Found {
		return 0, driver.Errorf(dcsync.NotFound, "latch.Count", "latch %s does not exist", l.key)
	}
	return res[0].Count, nil
}

// add changes the count by delta, which is always +1 or -1: a count within the int64
// range then wraps only to exactly MinInt64 (after +1) or MaxInt64 (after -1), neither
// of which a correct store can return after such an update.
func (l *CountDownLatch) add(ctx context.Context, op string, delta int64) (n int64, err error) {
	ctx, span := l.m.tel.Start(ctx, spanOps[op], l.key)
	defer func() {
		if err == nil && span.IsRecording() {
			span.SetAttributes(attribute.Int64(telemetry.AttrCount, n))
		}
		telemetry.End(span, err)
	}()
	epoch := epochs.Add(1) // before the update: it may end the waits that began before it
	start := time.Now()
	n, err = l.m.store.AddLatch(ctx, l.key, delta)
	l.m.tel.StoreCall(ctx, "add_latch", start, err)
	if err != nil {
		return 0, driver.Wrap(err, dcsync.Internal, op)
	}
	if (delta > 0 && n == math.MinInt64) || (delta < 0 && n == math.MaxInt64) {
		return 0, l.undoWrap(ctx, op, delta)
	}
	if n <= 0 {
		if w := l.m.watcher(); w != nil {
			w.reached(l.key, epoch, time.Now())
		}
	}
	return n, nil
}

// undoWrap handles a store that wrapped the count past the int64 range instead of
// refusing the update: it applies the opposite update (which wraps back to the count
// before) and reports InvalidArgument. Readers may have seen the wrapped count meanwhile.
func (l *CountDownLatch) undoWrap(ctx context.Context, op string, delta int64) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	start := time.Now()
	_, err := l.m.store.AddLatch(uctx, l.key, -delta)
	l.m.tel.StoreCall(uctx, "add_latch", start, err)
	if err != nil {
		return driver.Errorf(dcsync.Internal, op, "store %T wrapped the count of latch %s past the int64 range instead of refusing the update, and undoing it failed: %w", l.m.store, l.key, err)
	}
	return driver.Errorf(dcsync.InvalidArgument, op, "the count of latch %s would overflow int64 (store %T wrote it wrapped; undone)", l.key, l.m.store)
}

// WatcherStats describes the watcher that serves the Waits on a manager's store in this
// process: for monitoring, and for tests that must know a Wait has begun.
type WatcherStats struct {
	// Waits is the number of Waits in progress on the store, through any manager.
	Waits int
	// Latches is the number of distinct latches those Waits await.
	Latches int
}

// WatcherStats returns the current state of the watcher of the manager's store.
func (m *Manager) WatcherStats() WatcherStats {
	w := m.watcher()
	if w == nil {
		return WatcherStats{}
	}
	return w.stats()
}

// watcher returns the watcher waiters of this manager's store use, or nil if none.
func (m *Manager) watcher() *watcher {
	if m.own != nil {
		return m.own
	}
	return lookupWatcher(m.store)
}

// CountDown decrements the count by one and returns the count after the update (at the
// latch's level). It fails with NotFound, writing nothing, if the latch does not exist,
// and with InvalidArgument if the count would go below MinInt64. The count may go below
// zero. When the returned count is zero or less, waiters in this
// process are woken at once.
func (l *CountDownLatch) CountDown(ctx context.Context) (int64, error) {
	return l.add(ctx, "latch.CountDown", -1)
}

// Wait blocks until the count is zero or less, and returns nil then. Only what is
// observed after Wait begins counts: a read of the shared watcher begun after it (the
// first comes within one poll interval) or a local update begun after it.
//
// It returns an error with code NotFound if the latch does not exist (or expires while
// waited on); the store's error, if the latch cannot be read for a reason other than an
// outage; an error with code Connection if the store is closed (see the package doc);
// and, when ctx ends first, an error with code RetriesExhausted that also matches ctx's
// error (and, if the store was failing at the last read, the store's error) with
// errors.Is.
func (l *CountDownLatch) Wait(ctx context.Context) (err error) {
	ctx, span := l.m.tel.Start(ctx, "latch.wait", l.key)
	defer func() { telemetry.End(span, err) }()
	w := l.m.own
	if w == nil {
		w = acquireWatcher(l.m.store, l.m.log, l.m.tel)
		defer w.release()
	}
	return w.wait(ctx, l.key, l.m.interval, l.m.tel)
}

// spanOps maps the op names of add to telemetry operations.
var spanOps = map[string]string{"latch.CountDown": "latch.count_down", "latch.CountUp": "latch.count_up"}

// CountUpDownLatch is a count-up-down latch: a CountDownLatch whose count may also go up.
type CountUpDownLatch struct {
	CountDownLatch
}

// CountUp increments the count by one and returns the count after the update. It fails
// with NotFound, writing nothing, if the latch does not exist, and with InvalidArgument
// if the count would go above MaxInt64.
func (l *CountUpDownLatch) CountUp(ctx context.Context) (int64, error) {
	return l.add(ctx, "latch.CountUp", 1)
}
