// Package semaphore provides counting semaphores with leased, fenced permits on any
// dcsync store.
//
// A semaphore has N permits. Acquire(ctx, n) takes n of them at once, all or nothing;
// each permit is held under a lease (TTL) and carries a fencing token; KeepAlive renews
// the leases of a permit set and tells its holder, through a context, the moment any of
// them is lost; Release gives them back. Permits of a holder that crashed return when
// their leases end.
//
// # Storage
//
// A semaphore named NAME (at a level, for a client, and at level DC in a farm, as a
// lock) is:
//
//   - a register (driver.RegisterStore) at the name "semaphore:LEN:NAME", LEN the
//     length of NAME in bytes, holding the count record: a version byte (1), then N and
//     Max as unsigned varints. N is the number of permits; Max is the largest N the
//     semaphore ever had (slots from N to Max-1 may still be held after a shrink). It
//     is written create-only (generation 0) by the first Open and afterwards only by
//     Resize, a compare-and-set on its generation.
//   - one lock per permit slot i, 0 <= i < N, at the name "semaphore:LEN:NAME/i",
//     taken through package lock: the holder of that lock holds permit slot i.
//
// Only dcsync writes these names; the length prefix keeps every semaphore's names
// apart from every other's and from the names the Java libraries and package queue
// use. The longest slot name must fit in dcsync.MaxNameLen: a semaphore name longer
// than MaxNameLen-19 bytes is refused with InvalidArgument before any write.
//
// # Held and granted
//
// A slot is HELD when the store has a live lease on its lock. A permit is GRANTED when
// Acquire or TryAcquire returns it to a caller, and stays granted until it is released
// or its lease ends (by the lock package's deadline rule: Permits.Deadline). Every
// granted permit is held; a slot can be held without being granted for the moment an
// acquirer takes it and gives it back (it took fewer slots than it asked for, or the
// count shrank under it).
//
// The promise: the permits granted at any instant are on distinct slots, each below
// the count read after it was taken, so while no Resize runs they number at most N;
// after Resize to a smaller N returns nil they number at most the new N, until the
// next Resize. (While a shrinking Resize waits, permits granted before it above the
// new N are still granted: at most the old N in all.) It holds because an acquirer takes slots, then reads N again, and grants only slots
// below the N it read after its take; and Resize writes the new N first and returns
// only once every slot at or above it is free. A take that the store applied before
// Resize's write is seen by Resize's wait; one applied after it is followed by a read
// that sees the new N. (As for a lock, "granted" is by this process's reckoning of
// the lease: a holder paused past its lease, or a forward step of a store's clock,
// can hold a permit the store has already given to another. The fencing token is the
// defence, as for any lock. It also needs the store to read its latest writes: a
// register read that follows a lock take sees every register write completed before
// the take was applied, which holds on memory, SQLite and HBase, and on Aerospike
// while no partition or migration serves a stale replica.)
//
// # Fencing tokens
//
// Each permit carries its slot and the fencing token of the slot's lock: it strictly
// increases per slot, across every acquisition of that slot, also across lease
// expiries. It fences per slot: a resource guarded by the semaphore keeps the highest
// token seen for each slot and refuses a permit of a slot whose token is lower. Tokens
// of different slots are not ordered.
//
// # Waiting
//
// Acquire reads the count (it keeps the last one read), inspects the N slots in one
// batched call (driver.InspectLocks), and when at least n are free takes n of them,
// chosen at random, in one batched call (lock.Manager.TryAcquireMany: one
// driver.AcquireLocks call on a driver.LockMover store). When it takes fewer than n
// (another acquirer took some first), it gives back what it took and tries again after
// a jittered pause, so that two acquirers of n each never wait for each other while
// each holds a part. When fewer than n are free it waits with jittered exponential
// backoff; a release in this process (through any Manager on the same store value)
// wakes it at once. There is no order among waiters: an acquirer of many permits can
// be passed over by acquirers of fewer.
//
// KeepAlive renews the permits' leases through the semaphore's lock.Manager, whose
// renewals of every lease it keeps alive are batched in one store call per interval.
package semaphore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// MaxPermits is the largest number of permits a semaphore has.
const MaxPermits = 1024

// Defaults of a Manager, as package lock's.
const (
	DefaultTTL  = lock.DefaultTTL
	DefaultWait = lock.DefaultWait
)

// Manager acquires permits of semaphores for one client id in one farm, on one store.
// It is safe for concurrent use.
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
	drift      float64
	margin     time.Duration
	marginSet  bool
	log        *slog.Logger
	scope      any
}

// Option configures a Manager.
type Option func(*Manager)

// WithTTL sets the default lease of a permit (DefaultTTL if unset).
func WithTTL(ttl time.Duration) Option { return func(m *Manager) { m.ttl = ttl } }

// WithWait sets how long Acquire waits by default (DefaultWait if unset).
func WithWait(d time.Duration) Option { return func(m *Manager) { m.wait = d } }

// WithLevel sets the default level (DC if unset).
func WithLevel(l dcsync.Level) Option { return func(m *Manager) { m.level = l } }

// WithBackoff sets the bounds of Acquire's jittered exponential backoff between rounds
// (10ms and 1s if unset).
func WithBackoff(min, max time.Duration) Option {
	return func(m *Manager) { m.minBackoff, m.maxBackoff = min, max }
}

// WithSafetyMargin sets the safety margin of the permits' leases, as
// lock.WithSafetyMargin does for a lock.
func WithSafetyMargin(drift float64, margin time.Duration) Option {
	return func(m *Manager) { m.drift, m.margin, m.marginSet = drift, margin, true }
}

// WithLogger sets the logger (slog.Default() if unset).
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// New returns a Manager for the given client and farm ids. It validates its input and
// does no I/O.
func New(store driver.Store, client, farm string, opts ...Option) (*Manager, error) {
	m := &Manager{store: store, client: client, farm: farm, level: dcsync.DC, ttl: DefaultTTL, wait: DefaultWait,
		minBackoff: 10 * time.Millisecond, maxBackoff: time.Second, log: slog.Default()}
	for _, o := range opts {
		o(m)
	}
	if store == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, "semaphore.New", "store is nil")
	}
	m.regs = store
	var err error
	lopts := []lock.Option{lock.WithLevel(m.level), lock.WithTTL(m.ttl), lock.WithWait(m.wait),
		lock.WithBackoff(m.minBackoff, m.maxBackoff), lock.WithLogger(m.log)}
	if m.marginSet {
		lopts = append(lopts, lock.WithSafetyMargin(m.drift, m.margin))
	}
	if m.locks, err = lock.New(store, client, farm, lopts...); err != nil {
		return nil, driver.Wrap(err, dcsync.InvalidArgument, "semaphore.New")
	}
	m.scope = scopeOf(store, m)
	return m, nil
}

// CallOption sets the level, TTL or wait of one call, overriding the manager's
// defaults. Level applies to the calls that name a semaphore (Open, Resize, Status,
// Release); Acquire and TryAcquire use their Semaphore's level.
type CallOption func(*spec)

type spec struct {
	level dcsync.Level
	ttl   time.Duration
	wait  time.Duration
}

// Level sets the semaphore's level.
func Level(l dcsync.Level) CallOption { return func(s *spec) { s.level = l } }

// TTL sets the lease of the permits taken.
func TTL(ttl time.Duration) CallOption { return func(s *spec) { s.ttl = ttl } }

// Wait sets how long Acquire waits; 0 means one round, as TryAcquire.
func Wait(d time.Duration) CallOption { return func(s *spec) { s.wait = d } }

func (m *Manager) spec(opts []CallOption) spec {
	s := spec{level: m.level, ttl: m.ttl, wait: m.wait}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// regName and slotName are the store names of a semaphore's register and permit slots.
func regName(name string) string { return fmt.Sprintf("semaphore:%d:%s", len(name), name) }

func slotName(name string, i int) string {
	return fmt.Sprintf("semaphore:%d:%s/%d", len(name), name, i)
}

// key returns the register key of semaphore name at level, validating name, level and
// permits (0: not checked).
func (m *Manager) key(op, name string, level dcsync.Level, permits int) (dcsync.Key, error) {
	if err := driver.ValidateName("semaphore", name); err != nil {
		return dcsync.Key{}, err
	}
	if n := len(slotName(name, MaxPermits-1)); n > dcsync.MaxNameLen {
		return dcsync.Key{}, driver.Errorf(dcsync.InvalidArgument, op, "semaphore name of %d bytes is too long: its permit slots' lock names would be %d bytes, more than %d", len(name), n, dcsync.MaxNameLen)
	}
	if level != dcsync.DC && level != dcsync.XDC {
		return dcsync.Key{}, driver.Errorf(dcsync.InvalidArgument, op, "level %d is not DC or XDC", int(level))
	}
	if permits != 0 && (permits < 1 || permits > MaxPermits) {
		return dcsync.Key{}, driver.Errorf(dcsync.InvalidArgument, op, "%d permits: want 1 to %d", permits, MaxPermits)
	}
	k := dcsync.Key{Level: level, Client: m.client, Farm: m.farm, Name: regName(name)}
	return k, driver.ValidateKey("semaphore", k)
}

// read returns the semaphore's register and its count (found false when the register
// does not exist).
func (m *Manager) read(ctx context.Context, op string, k dcsync.Key) (driver.Register, count, bool, error) {
	res, err := m.regs.ReadRegisters(ctx, []dcsync.Key{k})
	if err == nil && len(res) != 1 {
		err = driver.Errorf(dcsync.Internal, op, "the store returned %d results for 1 register", len(res))
	}
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		return driver.Register{}, count{}, false, driver.Wrap(err, dcsync.Internal, op)
	}
	r := res[0].Register
	if r.Gen == 0 {
		return r, count{}, false, nil
	}
	c, err := decodeCount(r.Value)
	if err != nil {
		return r, count{}, false, driver.Errorf(dcsync.Internal, op, "register of %s (generation %d) is not a semaphore's count: %v", k, r.Gen, err)
	}
	return r, c, true, nil
}

// Semaphore is one semaphore, opened by Manager.Open. Its methods are safe for
// concurrent use.
type Semaphore struct {
	m     *Manager
	name  string
	level dcsync.Level
	key   dcsync.Key
	wk    wakeKey
	n     chan int // the count read last; a buffer of one, always full
}

// Open returns the semaphore name with permits permits. It creates the semaphore (its
// count register, written create-only) when it does not exist. When it exists with
// another number of permits it returns a Conflict error (errors.Is(err,
// dcsync.ErrConflict)) naming the stored number, and changes nothing: change the
// number with Resize. permits must lie in [1, MaxPermits] (InvalidArgument otherwise,
// before any I/O).
func (m *Manager) Open(ctx context.Context, name string, permits int, opts ...CallOption) (*Semaphore, error) {
	const op = "semaphore.Open"
	sp := m.spec(opts)
	if permits == 0 {
		permits = -1 // 0 means "not checked" to key
	}
	k, err := m.key(op, name, sp.level, permits)
	if err != nil {
		return nil, err
	}
	for {
		_, c, found, err := m.read(ctx, op, k)
		if err != nil {
			return nil, err
		}
		if !found {
			_, err := m.regs.SwapRegister(ctx, k, 0, count{N: permits, Max: permits}.encode())
			if errors.Is(err, dcsync.ErrConflict) {
				continue // created by another meanwhile: read what it wrote
			}
			if err != nil {
				return nil, driver.Wrap(err, dcsync.Internal, op)
			}
			c = count{N: permits, Max: permits}
		}
		if c.N != permits {
			return nil, driver.Errorf(dcsync.Conflict, op, "semaphore %q has %d permits, not %d (change the number with Resize)", name, c.N, permits)
		}
		s := &Semaphore{m: m, name: name, level: sp.level, key: k, wk: m.wakeKey(sp.level, name), n: make(chan int, 1)}
		s.n <- c.N
		return s, nil
	}
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the number of permits this process read last.
func (s *Semaphore) Permits() int {
	n := <-s.n
	s.n <- n
	return n
}

func (s *Semaphore) setPermits(n int) {
	<-s.n
	s.n <- n
}

// readN reads the semaphore's count.
func (s *Semaphore) readN(ctx context.Context, op string) (int, error) {
	_, c, found, err := s.m.read(ctx, op, s.key)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, driver.Errorf(dcsync.Internal, op, "semaphore %q has no count register", s.name)
	}
	s.setPermits(c.N)
	return c.N, nil
}

// slotKeys returns the lock keys of slots [from, to).
func (m *Manager) slotKeys(level dcsync.Level, name string, from, to int) []dcsync.Key {
	keys := make([]dcsync.Key, 0, max(to-from, 0))
	for i := from; i < to; i++ {
		keys = append(keys, dcsync.Key{Level: level, Client: m.client, Farm: m.farm, Name: slotName(name, i)})
	}
	return keys
}

// inspect returns the state of slots [from, to) in one batched call: a LockResult per
// slot, Err NotFound for a free one.
func (m *Manager) inspect(ctx context.Context, op string, level dcsync.Level, name string, from, to int) ([]driver.LockResult, error) {
	keys := m.slotKeys(level, name, from, to)
	if len(keys) == 0 {
		return nil, nil
	}
	res, err := driver.InspectLocks(ctx, m.store, keys)
	if err == nil && len(res) != len(keys) {
		err = driver.Errorf(dcsync.Internal, op, "the store returned %d results for %d locks", len(res), len(keys))
	}
	if err != nil {
		return nil, driver.Wrap(err, dcsync.Internal, op)
	}
	for _, r := range res {
		if r.Err != nil && !errors.Is(r.Err, dcsync.ErrNotFound) {
			return nil, driver.Wrap(r.Err, dcsync.Internal, op)
		}
	}
	return res, nil
}

// TryAcquire takes n permits if n are free, in one round (see Waiting in the package
// doc), and fails with LockUnavailable otherwise, holding none. n must lie in [1, N]:
// InvalidArgument otherwise, before any write.
func (s *Semaphore) TryAcquire(ctx context.Context, n int, opts ...CallOption) (*Permits, error) {
	sp := s.m.spec(opts)
	sp.wait = 0
	return s.acquire(ctx, "semaphore.TryAcquire", n, sp)
}

// Acquire takes n permits, all or nothing, waiting while fewer than n are free for at
// most the wait (DefaultWait unless set) and while ctx lasts (see Waiting in the
// package doc). When the wait runs out it returns LockUnavailable; when ctx ends it
// returns an error with code LockUnavailable that also matches ctx's error. n must lie
// in [1, N]: InvalidArgument otherwise (a Resize applies to open Semaphores at once).
// It comes before any write when n exceeds the count this Semaphore read last; when a
// shrink it had not seen yet makes n exceed the stored count, it comes after the slots
// of that round are given back (one take and its release; nothing stays held).
func (s *Semaphore) Acquire(ctx context.Context, n int, opts ...CallOption) (*Permits, error) {
	return s.acquire(ctx, "semaphore.Acquire", n, s.m.spec(opts))
}

func (s *Semaphore) acquire(ctx context.Context, op string, n int, sp spec) (*Permits, error) {
	m := s.m
	if n < 1 || n > MaxPermits {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%d permits: want 1 to the semaphore's count", n)
	}
	if sp.wait < 0 {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "wait %v is negative", sp.wait)
	}
	if err := driver.ValidateTTL(sp.ttl); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(sp.wait)
	w := join(s.wk)
	defer w.leave()
	N, fresh := s.Permits(), false
	backoff := m.minBackoff
	free := 0
	gaveUp := func(last error) error {
		msg := fmt.Sprintf("%s: %d of %d permits free, %d wanted", s.name, free, N, n)
		if sp.wait > 0 {
			msg += "; gave up waiting"
		}
		var cause error
		if ctx.Err() != nil {
			cause = ctx.Err()
			if last != nil && errors.Is(last, cause) {
				cause = last
			}
		}
		return &dcsync.Error{Code: dcsync.LockUnavailable, Op: op, Msg: msg, Err: cause}
	}
	for {
		w.drain() // the round below sees every release made so far
		if n > N {
			if !fresh {
				var err error
				if N, err = s.readN(ctx, op); err != nil {
					return nil, err
				}
				fresh = true
				continue
			}
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "semaphore %q has %d permits: cannot take %d", s.name, N, n)
		}
		p, collided, err := s.round(ctx, op, n, N, sp, &free)
		if err != nil {
			if ctx.Err() != nil {
				return nil, gaveUp(err)
			}
			return nil, err
		}
		if p != nil {
			return p, nil
		}
		if N2 := s.Permits(); N2 != N {
			// The round read a new count (it took slots the count no longer has): try
			// again at once with it.
			N, fresh = N2, true
			continue
		}
		if time.Until(deadline) <= 0 {
			if !fresh {
				// The count this Semaphore read last may be stale (another manager
				// grew it): before refusing, look once more with the stored count.
				old := N
				if N, err = s.readN(ctx, op); err != nil {
					if ctx.Err() != nil {
						return nil, gaveUp(err)
					}
					return nil, err
				}
				fresh = true
				if N != old {
					continue
				}
			}
			return nil, gaveUp(nil)
		}
		// Collided: another acquirer took some of the slots first. Both gave back what
		// they took and woke each other; a jittered pause that no wake-up cuts short
		// lets one of them go first next time.
		sleep := min(time.Until(deadline), backoff/2+rand.N(backoff/2+1))
		backoff = min(2*backoff, m.maxBackoff)
		if err := w.pause(ctx, sleep, !collided); err != nil {
			return nil, gaveUp(nil)
		}
		if N, err = s.readN(ctx, op); err != nil {
			if ctx.Err() != nil {
				return nil, gaveUp(err)
			}
			return nil, err
		}
		fresh = true
	}
}

// round makes one attempt to take n of the N slots: inspect, take, read the count
// again. It returns the permits when it took n slots below the count it read after the
// take; otherwise nil, having given back whatever it took, and whether it took some
// but not all (collided). *free is set to the free slots the inspect saw.
func (s *Semaphore) round(ctx context.Context, op string, n, N int, sp spec, free *int) (*Permits, bool, error) {
	m := s.m
	res, err := m.inspect(ctx, op, s.level, s.name, 0, N)
	if err != nil {
		return nil, false, err
	}
	var slots []int
	for i, r := range res {
		if r.Err != nil { // NotFound: free
			slots = append(slots, i)
		}
	}
	*free = len(slots)
	if len(slots) < n {
		return nil, false, nil
	}
	rand.Shuffle(len(slots), func(i, j int) { slots[i], slots[j] = slots[j], slots[i] })
	slots = slots[:n]
	names := make([]string, n)
	for i, slot := range slots {
		names[i] = slotName(s.name, slot)
	}
	taken, err := m.locks.TryAcquireMany(ctx, names, lock.Level(s.level), lock.TTL(sp.ttl))
	if err != nil {
		return nil, false, err
	}
	var got []*lock.Lock
	var gotSlots []int
	var failed error
	for i, t := range taken {
		switch {
		case t.Err == nil:
			got, gotSlots = append(got, t.Lock), append(gotSlots, slots[i])
		case !errors.Is(t.Err, dcsync.ErrLockUnavailable) && failed == nil:
			failed = t.Err
		}
	}
	if failed != nil {
		s.giveBack(ctx, got)
		return nil, false, failed
	}
	if len(got) < n {
		s.giveBack(ctx, got)
		return nil, true, nil
	}
	// Every slot taken: read the count again. Only slots below the count read AFTER the
	// take may be granted (see "Held and granted" in the package doc).
	N2, err := s.readN(ctx, op)
	if err != nil {
		s.giveBack(ctx, got)
		return nil, false, err
	}
	for _, slot := range gotSlots {
		if slot >= N2 {
			s.giveBack(ctx, got)
			return nil, false, nil
		}
	}
	return newPermits(s, got, gotSlots), false, nil
}

// giveBack releases locks taken but not granted, in one call, and wakes the acquirers
// of this process.
func (s *Semaphore) giveBack(ctx context.Context, locks []*lock.Lock) {
	if len(locks) == 0 {
		return
	}
	for i, err := range s.m.locks.ReleaseMany(context.WithoutCancel(ctx), locks) {
		if err != nil {
			s.m.log.Debug("dcsync semaphore: give-back failed; the slot returns when its lease ends",
				"semaphore", s.name, "slot", locks[i].Key().Name, "err", err)
		}
	}
	wake(s.wk)
}

// Resize sets the number of permits of semaphore name to permits, by a compare-and-set
// on its count register. Growing takes effect at once. Shrinking never lets more than
// the new number be granted: after writing it, Resize waits, while ctx lasts, until
// every permit slot at or above the new number is free (the permits granted there are
// released or their leases end), and returns nil only then; from then on at most
// permits are granted, until the next Resize. When ctx ends first it returns an error
// with code LockUnavailable matching ctx's error: the new number is stored and applies
// to new acquisitions, but permits above it are still granted; calling Resize again
// with the same number waits for them again. It returns NotFound when the semaphore
// does not exist. permits must lie in [1, MaxPermits].
func (m *Manager) Resize(ctx context.Context, name string, permits int, opts ...CallOption) error {
	const op = "semaphore.Resize"
	sp := m.spec(opts)
	if permits == 0 {
		permits = -1
	}
	k, err := m.key(op, name, sp.level, permits)
	if err != nil {
		return err
	}
	var c count
	for {
		r, cur, found, err := m.read(ctx, op, k)
		if err != nil {
			return err
		}
		if !found {
			return driver.Errorf(dcsync.NotFound, op, "semaphore %q does not exist", name)
		}
		c = count{N: permits, Max: max(cur.Max, permits)}
		if c == cur {
			break
		}
		_, err = m.regs.SwapRegister(ctx, k, r.Gen, c.encode())
		if errors.Is(err, dcsync.ErrConflict) {
			continue // another Resize came first: apply this one to what it wrote
		}
		if err != nil {
			return driver.Wrap(err, dcsync.Internal, op)
		}
		break
	}
	if c.Max <= permits {
		return nil
	}
	// Wait until no slot at or above the new count is held.
	w := joinAs(m.wakeKey(sp.level, name), false)
	defer w.leave()
	backoff := m.minBackoff
	for {
		w.drain()
		res, err := m.inspect(ctx, op, sp.level, name, permits, c.Max)
		if err != nil {
			if ctx.Err() != nil {
				return &dcsync.Error{Code: dcsync.LockUnavailable, Op: op, Msg: fmt.Sprintf("%q now has %d permits, but permits above them may still be granted", name, permits), Err: err}
			}
			return err
		}
		held := 0
		for _, r := range res {
			if r.Err == nil {
				held++
			}
		}
		if held == 0 {
			return nil
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, m.maxBackoff)
		if err := w.pause(ctx, sleep, true); err != nil {
			return &dcsync.Error{Code: dcsync.LockUnavailable, Op: op, Msg: fmt.Sprintf("%q now has %d permits, but %d permit(s) above them are still held", name, permits, held), Err: err}
		}
	}
}

// Holder is one held permit slot as Status reports it.
type Holder struct {
	// Slot is the permit slot; slots at or above Status.Permits are held from before a
	// shrink and are given up by their holders.
	Slot int
	// Owner, Token and Expires are the slot's lock state (Expires by the store's clock).
	Owner   string
	Token   uint64
	Expires time.Time
}

// Status is a semaphore's state as the store holds it.
type Status struct {
	// Permits is N, the number of permits.
	Permits int
	// Max is the largest number of permits the semaphore ever had.
	Max int
	// Held lists the held permit slots, in slot order.
	Held []Holder
}

// Status reads semaphore name's count and its held slots (two store calls). It returns
// NotFound when the semaphore does not exist.
func (m *Manager) Status(ctx context.Context, name string, opts ...CallOption) (Status, error) {
	const op = "semaphore.Status"
	sp := m.spec(opts)
	k, err := m.key(op, name, sp.level, 0)
	if err != nil {
		return Status{}, err
	}
	_, c, found, err := m.read(ctx, op, k)
	if err != nil {
		return Status{}, err
	}
	if !found {
		return Status{}, driver.Errorf(dcsync.NotFound, op, "semaphore %q does not exist", name)
	}
	res, err := m.inspect(ctx, op, sp.level, name, 0, c.Max)
	if err != nil {
		return Status{}, err
	}
	st := Status{Permits: c.N, Max: c.Max}
	for i, r := range res {
		if r.Err == nil {
			st.Held = append(st.Held, Holder{Slot: i, Owner: r.State.Owner, Token: r.State.Token, Expires: r.State.Expires})
		}
	}
	return st, nil
}

// Release frees the permits of semaphore name held by owners (ids from Permit.Owner,
// say from another process), in two store calls (an inspect of the slots and one
// batched release). It returns LockLost naming the owners that hold no permit of the
// semaphore, having freed the others.
func (m *Manager) Release(ctx context.Context, name string, owners []string, opts ...CallOption) error {
	const op = "semaphore.Release"
	sp := m.spec(opts)
	k, err := m.key(op, name, sp.level, 0)
	if err != nil {
		return err
	}
	for _, o := range owners {
		if err := driver.ValidateOwner(o); err != nil {
			return err
		}
	}
	_, c, found, err := m.read(ctx, op, k)
	if err != nil {
		return err
	}
	if !found {
		return driver.Errorf(dcsync.NotFound, op, "semaphore %q does not exist", name)
	}
	res, err := m.inspect(ctx, op, sp.level, name, 0, c.Max)
	if err != nil {
		return err
	}
	slotOf := map[string]int{}
	for i, r := range res {
		if r.Err == nil && r.State.Owner != "" {
			slotOf[r.State.Owner] = i
		}
	}
	var reqs []driver.LockRelease
	var missing []string
	keys := m.slotKeys(sp.level, name, 0, c.Max)
	for _, o := range owners {
		i, ok := slotOf[o]
		if !ok {
			missing = append(missing, o)
			continue
		}
		reqs = append(reqs, driver.LockRelease{Key: keys[i], Owner: o})
	}
	if len(reqs) > 0 {
		out, err := driver.ReleaseLocks(ctx, m.store, reqs)
		if err != nil {
			return driver.Wrap(err, dcsync.Internal, op)
		}
		wake(m.wakeKey(sp.level, name))
		for i, r := range out {
			if errors.Is(r.Err, dcsync.ErrLockLost) {
				missing = append(missing, reqs[i].Owner)
			} else if r.Err != nil {
				return driver.Wrap(r.Err, dcsync.Internal, op)
			}
		}
	}
	if len(missing) > 0 {
		return driver.Errorf(dcsync.LockLost, op, "no permit of %q is held by %v", name, missing)
	}
	return nil
}
