// Package rwlock provides distributed read-write locks on any dcsync store: many readers
// or one writer, each hold leased (TTL, KeepAlive) and fenced by a token, with writer
// preference (a waiting writer is not starved by a stream of readers) and a downgrade
// from write to read without a gap.
//
// # How it is built
//
// A read-write lock NAME is made of locks of package lock and one register
// (driver.RegisterStore), all keyed under the user's client, farm and level:
//
//	rwlock:<len>:<NAME>/w      the writer lock W (taken fairly: arrival order in a process)
//	rwlock:<len>:<NAME>/r<i>   reader slot i, 0 <= i < M
//	rwlock:<len>:<NAME>        the register holding M, the number of reader slots
//
// (<len> is NAME's length in bytes, so no name is a prefix of another's keys, and none
// collides with the Java libraries' lock names or the queue's.) M is fixed when the
// read-write lock is first used: the first Manager to find no register creates it (a
// compare-and-set on generation 0) with its WithReaders value (DefaultReaders unless
// set); every Manager, whatever its own WithReaders, uses the stored M. At most M
// readers hold at once; more wait for a slot.
//
// A reader takes a free slot, THEN reads W. When W is free it holds the read lock (the
// slot's lease). When W is held, by a writer that holds the lock or one that waits for
// the readers to leave, the reader gives its slot back and waits for W to be free
// before it tries again: that is the writer preference. A writer takes W (waiting for
// it, fairly), THEN waits until every slot is free (one batched driver.InspectLocks per
// poll), keeping W's lease alive meanwhile; it gives W back when its wait or ctx ends.
//
// Why at most one side holds: the reader's two steps are take(R) then read(W), the
// writer's are take(W) then read(every R). Each is a single-record operation of the
// store, and the store's records are linearizable, so the four operations happen in
// one order. If the reader's read(W) comes before the writer's take(W), the writer's
// read of R comes after the reader's take(R) and finds R held (until the reader
// releases it, which ends its read hold): the writer waits. Otherwise the reader's
// read(W) finds W held and the reader gives R back without holding. So a reader and a
// writer never both hold; two writers never both hold W. This holds while leases are
// honoured as package lock honours them: run the protected work under KeepAlive's
// context and stop when it ends.
//
// # Tokens
//
// A write Lock's Token is W's fencing token: it strictly increases across writers (and
// across downgrades: each write hold takes W anew), so a resource that remembers the
// highest token it has seen can refuse a stale writer. A read Lock's Token is its
// slot's token: it strictly increases across the holders of that slot only (Slot tells
// which), and is not comparable with W's or with another slot's. Readers need no
// fencing against one another; a resource that must refuse a stale reader keeps the
// highest token per slot.
//
// # Waiting
//
// Acquirers in one process, through Managers on the same store value, hear of each
// other's releases at once (a writer waiting for readers, a reader waiting for W or
// for a free slot). Releases elsewhere are seen by polling with jittered exponential
// backoff (WithBackoff). A process that has seen W held reads W before it takes a slot
// (one more store call), so that while a writer waits, readers of that process stop
// taking slots at all; otherwise a read lock costs three store calls (take a slot, read
// W, and the release), a write lock three (take W, read the M slots in one call, and the
// release). Readers can starve under a stream of writers: that is the price of writer
// preference.
//
// # Leases
//
// Each hold is one lock's lease (W's for a writer, a slot's for a reader), with
// package lock's deadline, safety margin and KeepAlive: the KeepAlives of one Manager
// are renewed together, one store call per interval for all its holds. A crashed
// holder's slot or W returns when its lease ends.
package rwlock

import (
	"context"
	"encoding/json"
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
	// DefaultReaders is the number of reader slots a Manager creates a read-write lock
	// with, unless WithReaders says otherwise.
	DefaultReaders = 64
	// MaxReaders is the most reader slots a read-write lock can have: a writer reads
	// them all in one batched call per poll.
	MaxReaders = 1024
	// DefaultTTL and DefaultWait are package lock's.
	DefaultTTL  = lock.DefaultTTL
	DefaultWait = lock.DefaultWait
)

// Mode is what a Lock holds: Read or Write.
type Mode int

const (
	// Read is a shared hold: many readers at once, no writer.
	Read Mode = iota + 1
	// Write is an exclusive hold: one writer, no reader.
	Write
)

// String returns "read" or "write".
func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Manager takes read and write locks for one client id in one farm, on one store. It is
// safe for concurrent use.
type Manager struct {
	store      driver.LockStore
	regs       driver.RegisterStore
	locks      *lock.Manager
	client     string
	farm       string
	level      dcsync.Level
	ttl        time.Duration
	wait       time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	readers    int
	log        *slog.Logger
	lockOpts   []lock.Option
	scope      any // keys the process-local state (see local.go)

	mu    sync.Mutex
	sizes map[lockID]int          // M of each read-write lock, as read from its register
	keys  map[lockID][]dcsync.Key // the keys of its reader slots
}

// Option configures a Manager.
type Option func(*Manager)

// WithReaders sets the number of reader slots (M) this Manager creates a read-write
// lock with when it finds none stored (DefaultReaders if unset; 1 to MaxReaders). A
// read-write lock already created keeps its own M: the stored one is used.
func WithReaders(n int) Option { return func(m *Manager) { m.readers = n } }

// WithTTL sets the default lease of a hold (DefaultTTL if unset).
func WithTTL(ttl time.Duration) Option { return func(m *Manager) { m.ttl = ttl } }

// WithWait sets how long an acquisition waits by default (DefaultWait if unset).
func WithWait(d time.Duration) Option { return func(m *Manager) { m.wait = d } }

// WithLevel sets the default level (DC if unset).
func WithLevel(l dcsync.Level) Option { return func(m *Manager) { m.level = l } }

// WithBackoff sets the bounds of the jittered exponential backoff between polls (10ms
// and 1s if unset), for W and the reader slots alike.
func WithBackoff(min, max time.Duration) Option {
	return func(m *Manager) { m.minBackoff, m.maxBackoff = min, max }
}

// WithLogger sets the logger (slog.Default() if unset).
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithLockOptions passes options to the lock.Manager the read-write locks are made of
// (lock.WithSafetyMargin, lock.WithYield, lock.WithMeterProvider, ...). The options
// above are applied after them.
func WithLockOptions(opts ...lock.Option) Option {
	return func(m *Manager) { m.lockOpts = append(m.lockOpts, opts...) }
}

// New returns a Manager for the given client and farm ids. store must also keep
// registers (implement driver.RegisterStore, as every store of this module does):
// New returns NotImplemented otherwise. It validates its input and does no I/O.
func New(store driver.LockStore, client, farm string, opts ...Option) (*Manager, error) {
	m := &Manager{store: store, client: client, farm: farm, level: dcsync.DC, ttl: DefaultTTL,
		wait: DefaultWait, minBackoff: 10 * time.Millisecond, maxBackoff: time.Second,
		readers: DefaultReaders, log: slog.Default(), sizes: map[lockID]int{}, keys: map[lockID][]dcsync.Key{}}
	for _, o := range opts {
		o(m)
	}
	if store == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, "rwlock.New", "store is nil")
	}
	if m.readers < 1 || m.readers > MaxReaders {
		return nil, driver.Errorf(dcsync.InvalidArgument, "rwlock.New", "readers %d is not in 1..%d", m.readers, MaxReaders)
	}
	regs, err := driver.Registers(store, "rwlock.New")
	if err != nil {
		return nil, err
	}
	m.regs = regs
	// W is taken fairly, in arrival order within the process, without the yield across
	// processes unless WithLockOptions asks for one (lock.WithYield).
	lopts := append(append([]lock.Option{lock.WithYield(0)}, m.lockOpts...), lock.WithLevel(m.level), lock.WithTTL(m.ttl),
		lock.WithWait(m.wait), lock.WithBackoff(m.minBackoff, m.maxBackoff), lock.WithLogger(m.log))
	if m.locks, err = lock.New(store, client, farm, lopts...); err != nil {
		return nil, err
	}
	m.scope = any(m)
	if reflect.ValueOf(store).Comparable() {
		m.scope = store
	}
	return m, nil
}

// CallOption sets the level, TTL or wait of one call, overriding the manager's
// defaults.
type CallOption func(*spec)

// Level sets the read-write lock's level.
func Level(l dcsync.Level) CallOption { return func(s *spec) { s.level = l } }

// TTL sets the lease of the hold.
func TTL(ttl time.Duration) CallOption { return func(s *spec) { s.ttl = ttl } }

// Wait sets how long the acquisition waits; 0 means try once.
func Wait(d time.Duration) CallOption { return func(s *spec) { s.wait = d } }

// spec is one call's settings and the names of its keys.
type spec struct {
	name  string
	level dcsync.Level
	ttl   time.Duration
	wait  time.Duration
	id    lockID
}

// lockID names one read-write lock in a store: at level XDC the farm is not part of it.
type lockID struct {
	level  dcsync.Level
	client string
	farm   string
	name   string
}

// base is the prefix of every key of the read-write lock name.
func base(name string) string { return fmt.Sprintf("rwlock:%d:%s", len(name), name) }

// writerName returns the name of W, slotName that of reader slot i, in the lock store.
func writerName(name string) string      { return base(name) + "/w" }
func slotName(name string, i int) string { return fmt.Sprintf("%s/r%d", base(name), i) }

func (m *Manager) spec(op, name string, opts []CallOption) (spec, error) {
	s := spec{name: name, level: m.level, ttl: m.ttl, wait: m.wait}
	for _, o := range opts {
		o(&s)
	}
	s.id = lockID{level: s.level, client: m.client, farm: m.farm, name: name}
	if s.level == dcsync.XDC {
		s.id.farm = ""
	}
	if s.wait < 0 {
		return s, driver.Errorf(dcsync.InvalidArgument, op, "wait %v is negative", s.wait)
	}
	if err := driver.ValidateTTL(s.ttl); err != nil {
		return s, err
	}
	if err := driver.ValidateKey("rwlock", dcsync.Key{Level: s.level, Client: m.client, Farm: m.farm, Name: name}); err != nil {
		return s, err
	}
	// Every key must fit, the last slot's included, before anything is written. The
	// stored M (read later) may be smaller than this Manager's: here the name must fit
	// with one slot; size checks it against the M it creates or finds.
	if err := fits(op, name, 1); err != nil {
		return s, err
	}
	return s, nil
}

// fits returns InvalidArgument when the key of the last of n reader slots of name would
// be longer than dcsync.MaxNameLen.
func fits(op, name string, n int) error {
	if long := slotName(name, n-1); len(long) > dcsync.MaxNameLen {
		return driver.Errorf(dcsync.InvalidArgument, op, "name of %d bytes is too long for %d reader slots: its key %.40q... is %d bytes, longer than %d", len(name), n, long, len(long), dcsync.MaxNameLen)
	}
	return nil
}

// key returns the store key of the lock or register n of s.
func (m *Manager) key(s spec, n string) dcsync.Key {
	return dcsync.Key{Level: s.level, Client: m.client, Farm: m.farm, Name: n}
}

// sizeValue is the register's value: JSON, so that it can grow fields.
type sizeValue struct {
	Readers int `json:"readers"`
}

// size returns M of the read-write lock of s: cached, else read from its register, which
// is created with this Manager's WithReaders value when there is none.
func (m *Manager) size(ctx context.Context, op string, s spec) (int, error) {
	m.mu.Lock()
	n, ok := m.sizes[s.id]
	m.mu.Unlock()
	if ok {
		return n, nil
	}
	k := m.key(s, base(s.name))
	var reg driver.Register
	for try := 1; ; try++ {
		rs, err := m.regs.ReadRegisters(ctx, []dcsync.Key{k})
		if err == nil {
			err = rs[0].Err
		}
		if err != nil {
			return 0, driver.Wrap(err, dcsync.Internal, op)
		}
		reg = rs[0].Register
		if reg.Gen != 0 {
			break
		}
		if err := fits(op, s.name, m.readers); err != nil {
			return 0, err // nothing written
		}
		v, _ := json.Marshal(sizeValue{Readers: m.readers})
		r, err := m.regs.SwapRegister(ctx, k, 0, v)
		switch {
		case err == nil:
			m.log.Debug("rwlock: created", "key", k.String(), "readers", m.readers)
		case dcsync.CodeOf(err) == dcsync.Conflict && r.Gen > 0:
			// Another process created it first: its M is the one.
		case dcsync.CodeOf(err) == dcsync.Connection && try < 3 && ctx.Err() == nil:
			// In doubt: the creation may have landed. Read again: the register
			// found is the one (this creation's or another's); none, create again
			// (a compare-and-set on generation 0 all the same).
			continue
		default:
			return 0, driver.Wrap(err, dcsync.Internal, op)
		}
		reg = r
		break
	}
	n, err := decodeSize(reg.Value)
	if err != nil {
		return 0, driver.Errorf(dcsync.Internal, op, "register %s: %v", k, err)
	}
	if n != m.readers {
		m.log.Debug("rwlock: stored reader slots differ from WithReaders; using the stored", "key", k.String(), "stored", n, "option", m.readers)
	}
	if err := fits(op, s.name, n); err != nil {
		return 0, err
	}
	m.mu.Lock()
	if len(m.sizes) >= 4096 {
		clear(m.sizes)
	}
	m.sizes[s.id] = n
	m.mu.Unlock()
	return n, nil
}

func decodeSize(b []byte) (int, error) {
	var v sizeValue
	if err := json.Unmarshal(b, &v); err != nil {
		return 0, fmt.Errorf("value %q is not a read-write lock's: %v", b, err)
	}
	if v.Readers < 1 || v.Readers > MaxReaders {
		return 0, fmt.Errorf("value %q: readers %d not in 1..%d", b, v.Readers, MaxReaders)
	}
	return v.Readers, nil
}

// slotKeys returns the keys of the n reader slots of s (made once per read-write lock
// and kept with its M; the caller must not change them).
func (m *Manager) slotKeys(s spec, n int) []dcsync.Key {
	m.mu.Lock()
	keys := m.keys[s.id]
	m.mu.Unlock()
	if len(keys) == n {
		return keys
	}
	keys = make([]dcsync.Key, n)
	for i := range keys {
		keys[i] = m.key(s, slotName(s.name, i))
	}
	m.mu.Lock()
	if len(m.keys) >= 4096 {
		clear(m.keys)
	}
	m.keys[s.id] = keys
	m.mu.Unlock()
	return keys
}
