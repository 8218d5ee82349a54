// Package lock provides distributed locks with leases, fencing tokens and keep-alive on
// any dcsync store.
//
// A lock is held under a lease (TTL). Each acquisition gets an owner id and a fencing
// token that strictly increases per lock key, also across lease expiries, so a
// protected resource can refuse a stale holder. Refresh and Release act only for the
// owner: once the lease has lapsed they return LockLost and leave the next holder alone.
// KeepAlive renews the lease and tells the holder, through a context, the moment the
// lease is lost.
//
// # Lease deadlines and the safety margin
//
// The store ends a lease TTL after it applied the acquisition or the last refresh, by
// its own clock. This process cannot know that instant; what it knows is when it SENT
// the request, which was earlier. So a Lock keeps a local deadline:
//
//	deadline = sent + TTL - (ClockDrift*TTL + Margin)
//
// measured on this process's monotonic clock from the moment the acquisition or the
// latest successful refresh was SENT (not from the reply, which a slow store would push
// past the store's end of the lease). This is Redlock's validity time: the TTL, minus the
// time since the request was sent, minus a drift allowance of 1% of the TTL plus a few
// milliseconds. The margin, DefaultClockDrift (1%) of the TTL plus DefaultMargin (5 ms)
// unless set with WithSafetyMargin, covers the store ending a lease slightly earlier
// than sent+TTL (SQLite and HBase keep lease ends in whole milliseconds, rounded down),
// clocks that run at slightly different rates, and timer and scheduling delay.
//
// KeepAlive renews when a third of the lease (TTL minus the margin) has passed since the
// last send, as etcd's client renews at a third of the TTL; it renews at once when it is
// started later than that. The KeepAlives of one Manager are renewed together, in one
// store call (a driver.LockBatcher batch, on a store that has it): a lease that would be
// due within the next half of its renewal interval is renewed early, with one that is
// due, so that a process holding any number of locks makes one renewal call per
// interval, as etcd's one session keep-alive covers all its locks; no lease is renewed
// later than a third into it. It retries failed renewals until the deadline and declares
// the lease lost AT the deadline, by the Manager's scheduler, even while a renewal is
// still blocked in the store; a lease the store answers LockLost for ends its own
// KeepAlive only. Run the protected work under KeepAlive's context and stop it
// when that context ends: while clocks keep within the margin, the store still holds the
// lease then, for about the margin. Deadline tells when that will be.
//
// One rule decides which side of the deadline an instant is on: the lease is held
// exactly at the instants before Deadline. Deadline, Held, KeepAlive and Refresh each
// apply it to one clock reading, so they agree to the nanosecond, and a lease once over
// stays over: KeepAlive called at or after the deadline returns a context already
// cancelled (LockLost), Refresh then returns LockLost without asking the store, and a
// renewal whose reply comes after the deadline does not extend the lease (LockLost).
// After a loss or Release, Deadline is the instant it happened.
//
// # Clocks
//
// Stores keep lease ends as wall-clock instants: SQLite by this host's clock, HBase and
// Aerospike by their servers' clocks or the writing client's. A Lock never derives its
// deadline from a stored instant (Expires is reported, never trusted): the deadline is
// the monotonic send time plus the lease, so no step of any wall clock extends it. This
// host's wall clock is watched as well: when it steps FORWARD (an NTP step, a manual
// date change), a SQLite lease ends early by as much in real time, so a Lock treats its
// lease as over when either clock says so, checked at every renewal and at least every
// tenth of the lease (a step is seen that late at worst). A BACKWARD step lengthens a
// SQLite lease in real time: safe for the holder, it only delays the next acquirer.
// Steps of another host's clock cannot be seen from here: a forward step larger than the
// margin on the clock that ends a remote store's leases lets another process acquire the
// lock while this one still believes it holds it. The fencing token (Token) is the
// defence against that, as against any pause of this process longer than the lease.
//
// # Waiting and fairness
//
// The stores keep no queue of waiters: an acquirer that finds the lock held learns of
// its release only by asking again. Acquire asks with jittered exponential backoff
// (WithBackoff), so by default a process that releases a lock and asks for it again
// gets it back long before the waiters elsewhere poll, and they can starve.
//
// Wake-ups. Acquirers in one process hear of releases made in that process: when a Lock
// is released (Lock.Release, or Manager.Release by owner id) or its lease is declared
// lost, every Acquire of that lock waiting in this process through any Manager on the
// same store value (at level XDC, of any farm) asks the store again at once instead of
// sleeping out its backoff. Releases by other processes, or through another store value
// (two sqlite.Open of one file are two store values), are seen only by polling.
//
// Fair mode (WithFairness, or Fair for one call) adds two rules, and guarantees this
// much and no more:
//
//   - Within a process, fair Acquires of a lock through one store value take it in the
//     order they were called. Only the earliest one still waiting asks the store; the
//     others wait, without store calls, for it to take the lock or give up. So a
//     goroutine that releases the lock and calls Acquire again queues behind the fair
//     acquirers already waiting, and no fair acquirer takes two turns while another
//     fair acquirer of its process waits. Another process, a TryAcquire, or a non-fair
//     Acquire can still take the lock between two fair holders (TryAcquire ignores
//     fairness, as tryLock does on a fair java.util.concurrent.locks.ReentrantLock), but
//     never reorders the fair acquirers of this process among themselves.
//   - Across processes, a process yields. The fair acquirers that were waiting when the
//     process took the lock form a batch, and the lock passes among them in order with
//     no pause. When a lock taken by a fair Acquire is released or lost, fair acquirers
//     of this process that are not in its batch (a goroutine asking again after its
//     turn is never in it) do not ask the store until the yield (WithYield; by default
//     5/4 of the maximum backoff) has passed since the release. So when another process
//     waits for the lock and asks for it at least once per yield (its maximum backoff
//     plus a store round trip is below the yield; the default ensures it for processes
//     with the same backoff whose store calls take less than a quarter of it; a fair
//     process that is yielding itself asks when its own yield ends, which with equal
//     yields is earlier), then between two batches of this process it asks at least
//     once while the lock is free, and takes it unless a third process asks first.
//     After its yield a process polls at its maximum backoff, giving the processes
//     that have waited longer the better chance.
//
// There is no order across processes: when several processes find the lock free, the
// first to ask takes it, so one of three or more processes can lose every race. Fair
// mode makes such starvation unlikely, not impossible; a queue in the store would be
// needed to rule it out. A waiter whose Wait or ctx ends during the yield gives up
// without having tried. Fairness costs time when nobody else wants the lock: up to the
// yield of idle lock per batch; WithYield(0) keeps the order within the process and
// gives up the yield. Java clients and other store values never yield.
package lock

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/telemetry"
)

// Defaults of a Manager, as in the Java lock manager.
const (
	DefaultTTL  = 90 * time.Second
	DefaultWait = 90 * time.Second
)

// Defaults of the safety margin (see the package doc): a lease is treated as over at
// sent + TTL - (DefaultClockDrift*TTL + DefaultMargin), 15 ms early for a 1 s lease and
// 905 ms early for the default 90 s.
const (
	// DefaultClockDrift is the fraction of the TTL allowed for clock rate differences
	// between this host and the store (Redlock's CLOCK_DRIFT_FACTOR).
	DefaultClockDrift = 0.01
	// DefaultMargin is the fixed part of the margin: the store's rounding of lease ends
	// down to whole milliseconds, plus timer and scheduling slack.
	DefaultMargin = 5 * time.Millisecond
)

// Manager acquires locks for one client id in one farm, on one store. It is safe for
// concurrent use.
type Manager struct {
	store      driver.LockStore
	client     string
	farm       string
	level      dcsync.Level
	ttl        time.Duration
	wait       time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	drift      float64
	margin     time.Duration
	log        *slog.Logger
	clk        clock
	fair       bool          // Acquire is fair unless a call says otherwise
	yield      time.Duration // how long fair acquirers leave a lock to others after a hold
	yieldSet   bool
	shared     bool // the store value keys the waiter queues (see waiters.go)
	mp         metric.MeterProvider
	tp         trace.TracerProvider
	tel        telemetry.Scope
	rnOnce     sync.Once
	rn         *renewer // renews the leases of its KeepAlives; made on first use
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

// WithSafetyMargin sets how much earlier than sent+TTL this process treats a lease as
// over: drift*TTL + margin (DefaultClockDrift and DefaultMargin if unset). drift must
// lie in [0, 0.5) and margin must not be negative; a call whose TTL leaves less than
// half of the lease after the margin is refused with InvalidArgument. Setting both to
// zero restores the unsafe behaviour of ending the lease exactly at sent+TTL.
func WithSafetyMargin(drift float64, margin time.Duration) Option {
	return func(m *Manager) { m.drift, m.margin = drift, margin }
}

// WithFairness makes Acquire fair by default (see Fairness in the package doc); the
// Fair call option overrides it for one call.
func WithFairness(on bool) Option { return func(m *Manager) { m.fair = on } }

// WithYield sets how long, after a lock taken by a fair Acquire of this manager is
// released or lost, fair acquirers of this process that arrive later leave it to other
// processes before they try it (see Fairness in the package doc). It should exceed the
// longest interval at which the other processes poll: their maximum backoff plus a
// store round trip. 0 keeps the order within this process and does not yield. Unset,
// it is 5/4 of the maximum backoff (1.25 s with the default backoff).
func WithYield(d time.Duration) Option { return func(m *Manager) { m.yield, m.yieldSet = d, true } }

// WithLogger sets the logger (slog.Default() if unset).
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithMeterProvider sets the OpenTelemetry meter provider the manager records its
// metrics with (otel.GetMeterProvider() if unset; see package telemetry).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(m *Manager) { m.mp = mp } }

// WithTracerProvider sets the OpenTelemetry tracer provider the manager records its
// spans with (otel.GetTracerProvider() if unset; see package telemetry).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(m *Manager) { m.tp = tp } }

// New returns a Manager for the given client and farm ids. It validates its input and
// does no I/O.
func New(store driver.LockStore, client, farm string, opts ...Option) (*Manager, error) {
	m := &Manager{store: store, client: client, farm: farm, level: dcsync.DC, ttl: DefaultTTL,
		wait: DefaultWait, minBackoff: 10 * time.Millisecond, maxBackoff: time.Second,
		drift: DefaultClockDrift, margin: DefaultMargin, log: slog.Default(), clk: sysClock{}}
	for _, o := range opts {
		o(m)
	}
	if store == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, "lock.New", "store is nil")
	}
	if err := driver.ValidateID("client", client); err != nil {
		return nil, err
	}
	if err := driver.ValidateID("farm", farm); err != nil {
		return nil, err
	}
	if m.level != dcsync.DC && m.level != dcsync.XDC {
		return nil, driver.Errorf(dcsync.InvalidArgument, "lock.New", "level %d is not DC or XDC", int(m.level))
	}
	if !(m.drift >= 0 && m.drift < 0.5) || m.margin < 0 {
		return nil, driver.Errorf(dcsync.InvalidArgument, "lock.New", "safety margin: drift %v must lie in [0, 0.5) and margin %v must not be negative", m.drift, m.margin)
	}
	if err := m.checkTTL("lock.New", m.ttl); err != nil {
		return nil, err
	}
	if m.wait < 0 || m.minBackoff <= 0 || m.maxBackoff < m.minBackoff {
		return nil, driver.Errorf(dcsync.InvalidArgument, "lock.New", "wait %v and backoff [%v, %v] must be positive and ordered", m.wait, m.minBackoff, m.maxBackoff)
	}
	if !m.yieldSet {
		m.yield = m.maxBackoff + m.maxBackoff/4
	}
	if m.yield < 0 {
		return nil, driver.Errorf(dcsync.InvalidArgument, "lock.New", "yield %v is negative", m.yield)
	}
	m.shared = shareable(store)
	m.tel = telemetry.NewScope(store, m.mp, m.tp)
	return m, nil
}

// CallOption sets the level, TTL, wait or fairness of one call, overriding the
// manager's defaults.
type CallOption func(*spec)

type spec struct {
	level dcsync.Level
	ttl   time.Duration
	wait  time.Duration
	fair  bool
}

// Level sets the lock's level.
func Level(l dcsync.Level) CallOption { return func(s *spec) { s.level = l } }

// TTL sets the lease.
func TTL(ttl time.Duration) CallOption { return func(s *spec) { s.ttl = ttl } }

// Wait sets how long Acquire waits; 0 means try once.
func Wait(d time.Duration) CallOption { return func(s *spec) { s.wait = d } }

// Fair sets whether Acquire is fair (see Fairness in the package doc). TryAcquire is
// never fair.
func Fair(on bool) CallOption { return func(s *spec) { s.fair = on } }

func (m *Manager) spec(name string, opts []CallOption) (dcsync.Key, spec, error) {
	s := spec{level: m.level, ttl: m.ttl, wait: m.wait, fair: m.fair}
	for _, o := range opts {
		o(&s)
	}
	k := dcsync.Key{Level: s.level, Client: m.client, Farm: m.farm, Name: name}
	if err := driver.ValidateKey("lock", k); err != nil {
		return k, s, err
	}
	if err := m.checkTTL("lock.Acquire", s.ttl); err != nil {
		return k, s, err
	}
	if s.wait < 0 {
		return k, s, driver.Errorf(dcsync.InvalidArgument, "lock.Acquire", "wait %v is negative", s.wait)
	}
	return k, s, nil
}

// safety returns the part of a lease of length ttl that this process gives up: the
// lease is treated as over at sent + ttl - safety(ttl).
func (m *Manager) safety(ttl time.Duration) time.Duration {
	return time.Duration(m.drift*float64(ttl)) + m.margin
}

// checkTTL validates ttl, and that the safety margin leaves at least half of it.
func (m *Manager) checkTTL(op string, ttl time.Duration) error {
	if err := driver.ValidateTTL(ttl); err != nil {
		return err
	}
	if s := m.safety(ttl); s > ttl/2 {
		return driver.Errorf(dcsync.InvalidArgument, op, "safety margin %v leaves less than half of the %v lease", s, ttl)
	}
	return nil
}

// newOwner returns a fresh random owner id (128 bits, hex).
func newOwner() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (m *Manager) try(ctx context.Context, k dcsync.Key, ttl time.Duration) (*Lock, error) {
	owner := newOwner()
	sent := m.clk.now()
	start := time.Now()
	st, err := m.store.AcquireLock(ctx, k, owner, ttl)
	m.tel.StoreCall(ctx, "acquire_lock", start, err)
	if err != nil {
		if dcsync.CodeOf(err) == dcsync.Connection {
			// The take may have landed and its reply been lost: give it back under
			// the owner id it was sent with, as TryAcquireMany does, so that it does
			// not stay held by an owner nobody knows until its lease ends.
			m.giveBack([]driver.LockAcquire{{Key: k, Owner: owner, TTL: ttl}})
		}
		return nil, driver.Wrap(err, dcsync.Internal, "lock.Acquire")
	}
	return newLock(m, k, ttl, st, sent), nil
}

// TryAcquire takes the lock if it is free and fails at once, with LockUnavailable,
// when someone holds it. It ignores fairness: like tryLock on a fair
// java.util.concurrent.locks.ReentrantLock, it takes a free lock even while fair
// acquirers wait for it. Acquire with Wait(0) and Fair(true) tries once and honours
// their order. A take whose outcome is unknown (a Connection error) is given back, under
// the owner id it was sent with, before TryAcquire (or Acquire) returns, as
// TryAcquireMany's are.
func (m *Manager) TryAcquire(ctx context.Context, name string, opts ...CallOption) (l *Lock, err error) {
	start := time.Now()
	k, s, err := m.spec(name, opts)
	ctx, span := m.tel.Start(ctx, "lock.try_acquire", k)
	defer func() { m.acquired(ctx, span, "lock.try_acquire", k, start, l, err) }()
	if err != nil {
		return nil, err
	}
	return m.try(ctx, k, s.ttl)
}

// acquired records the end of an Acquire or TryAcquire in its span and metrics.
func (m *Manager) acquired(ctx context.Context, span trace.Span, op string, k dcsync.Key, start time.Time, l *Lock, err error) {
	m.tel.Acquired(ctx, op, k.Level, start, err)
	if l != nil && span.IsRecording() {
		span.SetAttributes(attribute.Int64(telemetry.AttrToken, int64(l.token)))
	}
	telemetry.End(span, err)
}

// Acquire takes the lock, retrying with jittered exponential backoff while it is held,
// for at most the wait (DefaultWait unless set) and while ctx lasts. A release or lease
// loss of the lock in this process makes it retry at once. A fair Acquire (WithFairness,
// Fair) also waits for its turn among the fair acquirers of this process, and for the
// yield after this process held the lock (see Fairness in the package doc). When the
// wait runs out it returns LockUnavailable; when ctx ends it returns an error with code
// LockUnavailable that also matches ctx's error with errors.Is.
func (m *Manager) Acquire(ctx context.Context, name string, opts ...CallOption) (l *Lock, err error) {
	start := time.Now()
	k, s, err := m.spec(name, opts)
	ctx, span := m.tel.Start(ctx, "lock.acquire", k)
	defer func() { m.acquired(ctx, span, "lock.acquire", k, start, l, err) }()
	if err != nil {
		return nil, err
	}
	return m.acquire(ctx, k, s)
}

func (m *Manager) acquire(ctx context.Context, k dcsync.Key, s spec) (*Lock, error) {
	deadline := time.Now().Add(s.wait)
	w := m.join(k, s.fair)
	defer w.leave()
	backoff := m.minBackoff
	held := false // a try found the lock held, or fair acquirers of this process are ahead
	due := false  // a backoff pause has run out since the last try
	gaveUp := func(last error) error {
		msg := "gave up on " + k.String() + " before it could be taken"
		if held {
			msg = k.String() + " is held; gave up waiting"
		}
		// The cause matches ctx's error, said once: the store's error when it already
		// wraps it (a call cut short by ctx), else ctx's error with the last one's text.
		cause := ctx.Err()
		switch {
		case last != nil && errors.Is(last, cause):
			cause = last
		case last != nil && !errors.Is(last, dcsync.ErrLockUnavailable):
			cause = fmt.Errorf("%w (last try: %v)", cause, last)
		}
		return &dcsync.Error{Code: dcsync.LockUnavailable, Op: "lock.Acquire", Msg: msg, Err: cause}
	}
	for {
		if s.fair {
			v := w.view()
			if v.ahead > 0 || v.yield > 0 {
				// Not this acquirer's turn: wait to be first (woken by the one
				// ahead leaving), or for the yield to end, without asking the store.
				held = true
				d, why := time.Duration(-1), fmt.Sprintf("%d earlier fair acquirer(s) in this process still wait for it", v.ahead)
				if v.ahead == 0 {
					d, why = v.yield, "this process leaves it to other processes for a while after holding it"
				}
				over, err := w.pause(ctx, d, deadline)
				if err != nil {
					return nil, gaveUp(nil)
				}
				if over {
					return nil, driver.Errorf(dcsync.LockUnavailable, "lock.Acquire", "%s: gave up waiting: %s", k, why)
				}
				if v.ahead == 0 {
					// Having yielded, poll at the slowest rate: acquirers elsewhere
					// that have waited longer get the better chance.
					backoff = m.maxBackoff
				}
				continue
			}
			if v.taken && !due {
				// A fair acquirer of this process holds it: its release or lease
				// loss wakes this one. Poll only when the backoff runs out (it may
				// lapse unnoticed, or be released by owner id elsewhere).
				held = true
				if err := m.backOff(ctx, w, &backoff, deadline); err != nil {
					return nil, gaveUp(nil)
				}
				due = true
				continue
			}
		}
		w.drain() // the try below sees every release made so far
		l, err := m.try(ctx, k, s.ttl)
		due = false
		if errors.Is(err, dcsync.ErrLockUnavailable) {
			held = true
		}
		if err != nil && ctx.Err() != nil {
			// ctx ended, maybe in the middle of a store call: that is the end of
			// the wait, whatever error the store gave on the way out.
			return nil, gaveUp(err)
		}
		if err == nil && s.fair {
			w.took(l)
		}
		if err == nil || !errors.Is(err, dcsync.ErrLockUnavailable) {
			return l, err
		}
		if time.Until(deadline) <= 0 {
			return nil, err
		}
		if err := m.backOff(ctx, w, &backoff, deadline); err != nil {
			return nil, gaveUp(nil)
		}
		due = true
	}
}

// backOff sleeps for a jittered backoff (never past the deadline), cut short by a
// wake-up, and doubles the backoff up to its maximum. It returns ctx's error if ctx ends.
func (m *Manager) backOff(ctx context.Context, w *waiter, backoff *time.Duration, deadline time.Time) error {
	sleep := min(max(time.Until(deadline), 0), *backoff/2+rand.N(*backoff/2+1))
	*backoff = min(2**backoff, m.maxBackoff)
	_, err := w.pause(ctx, sleep, deadline)
	return err
}

// State is a lock holder's state as Inspect returns it: the owner of the acquisition,
// its fencing token, and when its lease ends by the store's clock.
type State = driver.LockState

// Inspect returns the state of the lock's holder, or NotFound when it is free.
func (m *Manager) Inspect(ctx context.Context, name string, opts ...CallOption) (State, error) {
	k, _, err := m.spec(name, opts)
	if err != nil {
		return driver.LockState{}, err
	}
	start := time.Now()
	st, err := m.store.InspectLock(ctx, k)
	m.tel.StoreCall(ctx, "inspect_lock", start, err)
	return st, driver.Wrap(err, dcsync.Internal, "lock.Inspect")
}

// Release frees the lock held by owner (an id from Lock.Owner, say from another
// process). It returns LockLost, and changes nothing, when owner does not hold it.
func (m *Manager) Release(ctx context.Context, name, owner string, opts ...CallOption) (err error) {
	k, _, err := m.spec(name, opts)
	ctx, span := m.tel.Start(ctx, "lock.release", k)
	defer func() { telemetry.End(span, err) }()
	if err != nil {
		return err
	}
	if err := driver.ValidateOwner(owner); err != nil {
		return err
	}
	start := time.Now()
	err = m.store.ReleaseLock(ctx, k, owner)
	m.tel.StoreCall(ctx, "release_lock", start, err)
	err = driver.Wrap(err, dcsync.Internal, "lock.Release")
	if err == nil {
		m.freed(k, nil)
	}
	return err
}
