// Package election provides leader election with fencing tokens on any dcsync store
// that keeps registers (driver.RegisterStore: every store of this module).
//
// A candidate calls Campaign and is blocked until it leads. Leadership is the holding
// of a lock (package lock, fair mode) and lasts while its lease is kept alive; the
// leader's value is published in a register beside it. Campaign returns a Leadership
// with:
//
//   - a fencing token (Token), the lock's: strictly greater than every earlier
//     leader's token of that election. Pass it to what the leader writes to, and have
//     that refuse tokens lower than the highest it has seen.
//   - a context (Context) cancelled the moment leadership is lost, by the rules of
//     lock.Lock.KeepAlive: the lease is renewed every third of the TTL, and declared
//     lost at this process's deadline (the TTL less a safety margin after the last
//     renewal was sent), so that the store still holds it for about the margin then.
//     Run the leader's work under it.
//   - Proclaim, to change the leader's value without losing leadership, and Resign.
//
// Campaign returns only after the value is published: from then on Leader and Observe
// report this leader with its value, anywhere.
//
// # Guarantees
//
//   - Never two leaders: leadership is the lock, and the lock's lease rules keep two
//     holders apart while clocks keep within the safety margin (see package lock). The
//     token is the defence when they do not (a paused process, a stepped clock).
//   - Tokens strictly increase from leader to leader of one election.
//   - The register never goes back: Campaign writes {token, value} only over a record
//     of a token not greater than its own, and Proclaim only over its own token's
//     record, each a compare-and-set on the register's generation. So a leader that
//     lost leadership without knowing it (its lease lapsed, another took over) cannot
//     change the value its successor published: its Proclaim finds the newer record
//     and returns LockLost, and a try of it that lands late finds a later generation
//     and writes nothing.
//   - Candidates of one process, through Managers on one store value, take leadership
//     in the order they called Campaign, and Resign hands it to the next of them with
//     no pause (the lock's fair mode with no yield; WithYield changes that). Across
//     processes there is no order: the first to ask after a release takes it.
//   - Observers see the leaders in the order of their records (tokens never go down),
//     each leader once per value, and every leader that held leadership with its
//     value published for longer than the poll interval plus one read of the store.
//     A leader that held it for less may be missed.
//
// # Leader and Observe
//
// Leader reads the register, then the lock: when the lock's holder is the token the
// register names, that is the leader (a consistent reading: the leader held the lock
// from its publish until after the register was read). When the lock is free there is
// no leader (NotFound). When the lock's holder has not published yet (the moment
// between taking the lock and writing the register, or a candidate that died there),
// Leader returns the holder's token with Pending set and no value.
//
// Observe delivers the leaders of an election on a channel. All the observers of one
// store value in a process share one watcher, which reads every observed election in
// two store calls per poll interval (WithPollInterval): one ReadRegisters and one
// driver.InspectLocks, whatever the number of observers and elections. A Campaign or
// Proclaim in the same process is delivered to its observers at once, without a read.
//
// # Storage
//
// An election NAME of client C at level L (in farm F at level DC) is the lock
// "election:<len(NAME)>:NAME" of C at L and F, and the register of the same key. The
// register holds a record: a version byte (1), the leader's token (8 bytes,
// big-endian) and its value. The Java libraries use neither: no lock name of theirs
// collides (the prefix and the length keep every election's key apart from each
// other's and from the queue's "queue:..." locks).
package election

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// Defaults of a Manager.
const (
	// DefaultTTL is the lease of a leadership (as lock.DefaultTTL).
	DefaultTTL = lock.DefaultTTL
	// DefaultPollInterval is how often the watcher of Observe reads the store.
	DefaultPollInterval = time.Second
)

// forever is how long Campaign waits: until ctx ends.
const forever = 100 * 365 * 24 * time.Hour

// Manager runs elections for one client id in one farm, on one store. It is safe for
// concurrent use.
type Manager struct {
	locks  *lock.Manager
	store  driver.LockStore
	regs   driver.RegisterStore
	client string
	farm   string
	level  dcsync.Level
	poll   time.Duration
	log    *slog.Logger
	scope  any // what keys the shared watcher (see watcher.go)

	// Lock options passed through.
	ttl              time.Duration
	minBack, maxBack time.Duration
	backSet          bool
	drift            float64
	margin           time.Duration
	marginSet        bool
	yield            time.Duration
	gensMu           sync.Mutex
	gens             map[dcsync.Key]uint64 // the latest register generation seen, by identity
	retry            time.Duration         // pause between retries of a failed register write
}

// Option configures a Manager.
type Option func(*Manager)

// WithTTL sets the lease of a leadership (DefaultTTL if unset).
func WithTTL(ttl time.Duration) Option { return func(m *Manager) { m.ttl = ttl } }

// WithLevel sets the level of the elections (DC if unset): at DC an election is one per
// farm, at XDC one across farms.
func WithLevel(l dcsync.Level) Option { return func(m *Manager) { m.level = l } }

// WithLogger sets the logger (slog.Default() if unset).
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithPollInterval sets how often the watcher of Observe reads the store
// (DefaultPollInterval if unset). Observers of one store value share a watcher, which
// reads at the shortest interval among them.
func WithPollInterval(d time.Duration) Option { return func(m *Manager) { m.poll = d } }

// WithBackoff sets the bounds of a waiting Campaign's backoff between tries of the lock
// (as lock.WithBackoff: 10ms and 1s if unset).
func WithBackoff(min, max time.Duration) Option {
	return func(m *Manager) { m.minBack, m.maxBack, m.backSet = min, max, true }
}

// WithSafetyMargin sets the leadership's safety margin (as lock.WithSafetyMargin).
func WithSafetyMargin(drift float64, margin time.Duration) Option {
	return func(m *Manager) { m.drift, m.margin, m.marginSet = drift, margin, true }
}

// WithYield sets how long, after a leader of this process resigns or loses
// leadership, candidates of this process that began campaigning after it took
// leadership leave it to other processes (as lock.WithYield). Unset, it is 0: Resign
// hands leadership to the next candidate of the process at once, and a process with
// candidates waiting keeps leadership.
func WithYield(d time.Duration) Option { return func(m *Manager) { m.yield = d } }

// New returns a Manager for the given client and farm ids. The store must keep
// registers (driver.RegisterStore), or New returns NotImplemented. It validates its
// input and does no I/O.
func New(store driver.LockStore, client, farm string, opts ...Option) (*Manager, error) {
	m := &Manager{store: store, client: client, farm: farm, level: dcsync.DC, ttl: DefaultTTL,
		poll: DefaultPollInterval, log: slog.Default(), gens: map[dcsync.Key]uint64{}, retry: 50 * time.Millisecond}
	for _, o := range opts {
		o(m)
	}
	if store == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, "election.New", "store is nil")
	}
	regs, err := driver.Registers(store, "election.New")
	if err != nil {
		return nil, err
	}
	m.regs = regs
	if m.poll <= 0 {
		return nil, driver.Errorf(dcsync.InvalidArgument, "election.New", "poll interval %v is not positive", m.poll)
	}
	if m.yield < 0 {
		return nil, driver.Errorf(dcsync.InvalidArgument, "election.New", "yield %v is negative", m.yield)
	}
	lopts := []lock.Option{lock.WithTTL(m.ttl), lock.WithLevel(m.level), lock.WithLogger(m.log),
		lock.WithFairness(true), lock.WithYield(m.yield), lock.WithWait(forever)}
	if m.backSet {
		lopts = append(lopts, lock.WithBackoff(m.minBack, m.maxBack))
	}
	if m.marginSet {
		lopts = append(lopts, lock.WithSafetyMargin(m.drift, m.margin))
	}
	m.locks, err = lock.New(store, client, farm, lopts...)
	if err != nil {
		return nil, rename(err, "election.New")
	}
	if reflect.ValueOf(regs).Comparable() {
		m.scope = regs
	} else {
		m.scope = m
	}
	return m, nil
}

// rename gives a validation error of package lock this package's op.
func rename(err error, op string) error {
	if e, ok := err.(*dcsync.Error); ok && e.Code == dcsync.InvalidArgument {
		c := *e
		c.Op = op
		return &c
	}
	return err
}

// lockName returns the name of the lock (and register) of election name.
func lockName(name string) string { return fmt.Sprintf("election:%d:%s", len(name), name) }

// key returns the key of election name, validated.
func (m *Manager) key(op, name string) (dcsync.Key, error) {
	if err := driver.ValidateName("election", name); err != nil {
		return dcsync.Key{}, rename(err, op)
	}
	k := dcsync.Key{Level: m.level, Client: m.client, Farm: m.farm, Name: lockName(name)}
	if len(k.Name) > dcsync.MaxNameLen {
		return k, driver.Errorf(dcsync.InvalidArgument, op, "election name %q makes a key of %d bytes, more than %d: use at most %d bytes", name, len(k.Name), dcsync.MaxNameLen, dcsync.MaxNameLen-len(lockName(""))-2)
	}
	return k, rename(driver.ValidateKey("election", k), op)
}

// identity is the key by which two handles of one election agree: the farm is dropped
// at level XDC, where the stores ignore it.
func identity(k dcsync.Key) dcsync.Key {
	if k.Level == dcsync.XDC {
		k.Farm = ""
	}
	return k
}

// seen records that the register of k is at generation gen or later.
func (m *Manager) seen(k dcsync.Key, gen uint64) {
	m.gensMu.Lock()
	defer m.gensMu.Unlock()
	id := identity(k)
	if gen > m.gens[id] {
		m.gens[id] = gen
	}
}

// lastGen returns the latest generation of k's register this manager saw (0: none).
func (m *Manager) lastGen(k dcsync.Key) uint64 {
	m.gensMu.Lock()
	defer m.gensMu.Unlock()
	return m.gens[identity(k)]
}

// Leader is an election's leader as Leader or Observe reports it.
type Leader struct {
	// Name is the election's name.
	Name string
	// Token is the leader's fencing token.
	Token uint64
	// Value is the value the leader published (Campaign or its latest Proclaim).
	Value string
	// Pending is set (by Leader only) when the lock's holder has not yet published its
	// value: Token is the holder's and Value is empty.
	Pending bool
}

// Campaign blocks until this candidate leads election name, publishes value as the
// leader's value, and returns the Leadership. Candidates of this process take
// leadership in the order they called Campaign. It waits while ctx lasts; when ctx
// ends first it returns an error with code LockUnavailable that also matches ctx's
// error. The leadership itself does not end with ctx: it lasts until Resign or until
// it is lost (see Leadership.Context). value is at most MaxValue bytes.
func (m *Manager) Campaign(ctx context.Context, name, value string) (*Leadership, error) {
	k, err := m.key("election.Campaign", name)
	if err != nil {
		return nil, err
	}
	if len(value) > MaxValue {
		return nil, driver.Errorf(dcsync.InvalidArgument, "election.Campaign", "value is %d bytes, more than %d", len(value), MaxValue)
	}
	l, err := m.locks.Acquire(ctx, k.Name)
	if err != nil {
		return nil, err
	}
	kctx := l.KeepAlive(context.WithoutCancel(ctx))
	lctx, cancel := context.WithCancelCause(kctx)
	ld := &Leadership{m: m, name: name, key: k, lock: l, ctx: lctx, cancel: cancel}
	if err := ld.publish(ctx, "election.Campaign", value, true); err != nil {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer rcancel()
		_ = l.Release(rctx)
		cancel(err)
		if ctx.Err() != nil && dcsync.CodeOf(err) == dcsync.Connection {
			// ctx ended before Campaign could return a leadership: as when it ends
			// while waiting (the lock is given up).
			err = driver.Errorf(dcsync.LockUnavailable, "election.Campaign", "election %q: ctx ended while publishing the value; leadership given up: %w", name, err)
		}
		return nil, err
	}
	return ld, nil
}

// Leader returns the leader of election name: the holder of its lock with the value it
// published; NotFound when nobody leads; the holder's token with Pending set when it
// has not published yet (see the package doc). Two store calls: the register, then the
// lock.
func (m *Manager) Leader(ctx context.Context, name string) (Leader, error) {
	k, err := m.key("election.Leader", name)
	if err != nil {
		return Leader{}, err
	}
	regs, err := m.regs.ReadRegisters(ctx, []dcsync.Key{k})
	if err == nil && len(regs) != 1 {
		err = driver.Errorf(dcsync.Internal, "election.Leader", "store returned %d registers for 1 key", len(regs))
	}
	if err == nil {
		err = regs[0].Err
	}
	if err != nil {
		return Leader{}, driver.Wrap(err, dcsync.Internal, "election.Leader")
	}
	st, err := m.store.InspectLock(ctx, k)
	if dcsync.CodeOf(err) == dcsync.NotFound {
		return Leader{}, driver.Errorf(dcsync.NotFound, "election.Leader", "election %q has no leader", name)
	}
	if err != nil {
		return Leader{}, driver.Wrap(err, dcsync.Internal, "election.Leader")
	}
	m.seen(k, regs[0].Register.Gen)
	return m.judge(name, regs[0].Register, st)
}

// judge returns the leader a reading of the register (first) and the lock (then)
// shows: the lock's holder, with the register's value when the register is at its
// token, else Pending.
func (m *Manager) judge(name string, reg driver.Register, st driver.LockState) (Leader, error) {
	if reg.Gen > 0 {
		rec, err := decodeRecord(reg.Value)
		if err != nil {
			return Leader{}, err
		}
		if rec.token == st.Token {
			return Leader{Name: name, Token: rec.token, Value: rec.value}, nil
		}
	}
	return Leader{Name: name, Token: st.Token, Pending: true}, nil
}
