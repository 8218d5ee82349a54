// Package memory is a dcsync store kept in the memory of one process: for tests, and for
// applications whose every participant runs in one process. Operations are atomic under
// one mutex; TTLs are enforced on read and expired entries are swept as they are met.
// Registers (driver.RegisterStore) are a map by key, never swept.
package memory

import (
	"context"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Store is an in-process driver.Store. The zero value is not usable; call New.
type Store struct {
	now func() time.Time

	mu      sync.Mutex
	closed  bool
	done    chan struct{} // closed by Close
	locks   map[lockID]lockEntry
	fences  map[lockID]uint64 // last token per lock key; never expires
	latches map[latchID]map[string]cell
	qs      map[string]*memQueue       // queues by name (queue.go)
	regs    map[lockID]driver.Register // registers (register.go); never deleted
}

type lockID struct {
	level              dcsync.Level
	farm, client, name string
}

type lockEntry struct {
	driver.LockState
}

type latchID struct{ client, name string }

type cell struct {
	count   int64
	expires time.Time
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read time from now instead of time.Now; for tests.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{
		now:     time.Now,
		locks:   map[lockID]lockEntry{},
		fences:  map[lockID]uint64{},
		latches: map[latchID]map[string]cell{},
		regs:    map[lockID]driver.Register{},
		done:    make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.CloseNotifier = (*Store)(nil)
)

func toLockID(k dcsync.Key) lockID {
	id := lockID{level: k.Level, farm: k.Farm, client: k.Client, name: k.Name}
	if k.Level == dcsync.XDC {
		id.farm = ""
	}
	return id
}

// begin validates and locks the store; the caller must unlock.
func (s *Store) begin(ctx context.Context, check error) error {
	if check != nil {
		return check
	}
	if err := ctx.Err(); err != nil {
		return driver.Errorf(dcsync.Connection, "memory", "context done: %w", err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return driver.Errorf(dcsync.Connection, "memory", "store is closed")
	}
	return nil
}

// liveLock returns the lock at id if its lease has not lapsed, sweeping it otherwise.
func (s *Store) liveLock(id lockID, now time.Time) (lockEntry, bool) {
	e, ok := s.locks[id]
	if ok && !now.Before(e.Expires) {
		delete(s.locks, id)
		return lockEntry{}, false
	}
	return e, ok
}

// AcquireLock implements driver.LockStore.
func (s *Store) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	if err := s.begin(ctx, driver.CheckLease(k, owner, ttl)); err != nil {
		return driver.LockState{}, err
	}
	defer s.mu.Unlock()
	return s.acquireLocked(k, owner, ttl, s.now())
}

// acquireLocked takes k for owner at now if it is free. s.mu must be held.
func (s *Store) acquireLocked(k dcsync.Key, owner string, ttl time.Duration, now time.Time) (driver.LockState, error) {
	id := toLockID(k)
	if e, ok := s.liveLock(id, now); ok {
		return e.LockState, driver.Errorf(dcsync.LockUnavailable, "memory.AcquireLock", "%s is held by %s", k, e.Owner)
	}
	s.fences[id]++
	st := driver.LockState{Owner: owner, Token: s.fences[id], Expires: now.Add(ttl)}
	s.locks[id] = lockEntry{st}
	return st, nil
}

// RefreshLock implements driver.LockStore.
func (s *Store) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	if err := s.begin(ctx, driver.CheckLease(k, owner, ttl)); err != nil {
		return driver.LockState{}, err
	}
	defer s.mu.Unlock()
	return s.refreshLocked(k, owner, ttl, s.now())
}

// refreshLocked extends owner's lease of k to ttl from now. s.mu must be held.
func (s *Store) refreshLocked(k dcsync.Key, owner string, ttl time.Duration, now time.Time) (driver.LockState, error) {
	id := toLockID(k)
	e, ok := s.liveLock(id, now)
	if !ok || e.Owner != owner {
		return driver.LockState{}, driver.Errorf(dcsync.LockLost, "memory.RefreshLock", "%s is not held by %s", k, owner)
	}
	e.Expires = now.Add(ttl)
	s.locks[id] = e
	return e.LockState, nil
}

// ReleaseLock implements driver.LockStore.
func (s *Store) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	if err := s.begin(ctx, driver.CheckLock(k, owner, 0)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	return s.releaseLocked(k, owner, s.now())
}

// releaseLocked frees k if owner holds it at now. s.mu must be held.
func (s *Store) releaseLocked(k dcsync.Key, owner string, now time.Time) error {
	id := toLockID(k)
	e, ok := s.liveLock(id, now)
	if !ok || e.Owner != owner {
		return driver.Errorf(dcsync.LockLost, "memory.ReleaseLock", "%s is not held by %s", k, owner)
	}
	delete(s.locks, id)
	return nil
}

// InspectLock implements driver.LockStore.
func (s *Store) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	if err := s.begin(ctx, driver.ValidateKey("lock", k)); err != nil {
		return driver.LockState{}, err
	}
	defer s.mu.Unlock()
	return s.inspectLocked(k, s.now())
}

// inspectLocked returns the state of k's holder at now, or NotFound. s.mu must be held.
func (s *Store) inspectLocked(k dcsync.Key, now time.Time) (driver.LockState, error) {
	e, ok := s.liveLock(toLockID(k), now)
	if !ok {
		return driver.LockState{}, driver.Errorf(dcsync.NotFound, "memory.InspectLock", "%s is free", k)
	}
	return e.LockState, nil
}

// liveCells returns the unexpired farm cells of a latch, sweeping expired ones.
func (s *Store) liveCells(id latchID, now time.Time) map[string]cell {
	cells := s.latches[id]
	for farm, c := range cells {
		if !now.Before(c.expires) {
			delete(cells, farm)
		}
	}
	if len(cells) == 0 {
		delete(s.latches, id)
		return nil
	}
	return cells
}

func exists(cells map[string]cell, k dcsync.Key) bool {
	if k.Level == dcsync.XDC {
		return len(cells) > 0
	}
	_, ok := cells[k.Farm]
	return ok
}

func countAt(cells map[string]cell, k dcsync.Key) int64 {
	if k.Level == dcsync.DC {
		return cells[k.Farm].count
	}
	counts := make([]int64, 0, len(cells))
	for _, c := range cells {
		counts = append(counts, c.count)
	}
	return driver.SumCounts(counts...)
}

func (s *Store) putCell(id latchID, farm string, c cell) {
	if s.latches[id] == nil {
		s.latches[id] = map[string]cell{}
	}
	s.latches[id][farm] = c
}

// CreateLatch implements driver.LatchStore.
func (s *Store) CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error {
	check := driver.CheckLatch(k, ttl)
	if check == nil {
		check = driver.ValidateCount(count)
	}
	if err := s.begin(ctx, check); err != nil {
		return err
	}
	defer s.mu.Unlock()
	id, now := latchID{k.Client, k.Name}, s.now()
	if exists(s.liveCells(id, now), k) {
		return driver.Errorf(dcsync.AlreadyExists, "memory.CreateLatch", "latch %s exists", k)
	}
	s.putCell(id, k.Farm, cell{count: count, expires: now.Add(ttl)})
	return nil
}

// EnsureLatch implements driver.LatchStore.
func (s *Store) EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (bool, error) {
	if err := s.begin(ctx, driver.CheckLatch(k, ttl)); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	id, now := latchID{k.Client, k.Name}, s.now()
	if exists(s.liveCells(id, now), k) {
		return false, nil
	}
	s.putCell(id, k.Farm, cell{count: 0, expires: now.Add(ttl)})
	return true, nil
}

// AddLatch implements driver.LatchStore.
func (s *Store) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	if err := s.begin(ctx, driver.CheckLatch(k, 0)); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	id, now := latchID{k.Client, k.Name}, s.now()
	cells := s.liveCells(id, now)
	if !exists(cells, k) {
		return 0, driver.Errorf(dcsync.NotFound, "memory.AddLatch", "latch %s does not exist", k)
	}
	c, ok := cells[k.Farm]
	if !ok {
		// An XDC update from a farm without a cell yet: the new cell ends with the latch.
		for _, o := range cells {
			if o.expires.After(c.expires) {
				c.expires = o.expires
			}
		}
	}
	n, err := driver.AddCount("memory.AddLatch", c.count, delta)
	if err == nil {
		_, err = driver.AddCount("memory.AddLatch", countAt(cells, k), delta)
	}
	if err != nil {
		return 0, err
	}
	c.count = n
	cells[k.Farm] = c
	return countAt(cells, k), nil
}

// ReadLatches implements driver.LatchStore.
func (s *Store) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	var check error
	for _, k := range keys {
		if check = driver.CheckLatch(k, 0); check != nil {
			break
		}
	}
	if err := s.begin(ctx, check); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	out := make([]driver.LatchCount, len(keys))
	for i, k := range keys {
		cells := s.liveCells(latchID{k.Client, k.Name}, now)
		if exists(cells, k) {
			out[i] = driver.LatchCount{Found: true, Count: countAt(cells, k)}
		}
	}
	return out, nil
}

// Close makes every later call fail with a Connection error, and closes Done. It may be
// called more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	return nil
}

// Done returns a channel that Close closes: latch Waits on this store end at once when
// it closes.
func (s *Store) Done() <-chan struct{} { return s.done }
