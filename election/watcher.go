package election

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/telemetry"
)

// readTimeout bounds one pass of the watcher's reads.
const readTimeout = 30 * time.Second

// watchers holds the shared watcher of each store value (or Manager, for a store whose
// type cannot key a map) while somebody observes through it.
var watchers = struct {
	sync.Mutex
	m map[any]*watcher
}{m: map[any]*watcher{}}

// watcher serves every Observe of one store value. It runs one goroutine while
// somebody observes. Each pass reads every observed election in two store calls, the
// registers first (ReadRegisters) and then the locks (driver.InspectLocks), and passes
// start at least the shortest observer's interval apart.
type watcher struct {
	scope any
	regs  driver.RegisterStore
	locks driver.LockStore
	log   *slog.Logger

	mu         sync.Mutex
	users      int // observers, for the map's lifetime
	names      map[dcsync.Key]*observed
	running    bool
	kick       chan struct{} // buffered 1: look at the schedule again
	lastRead   time.Time
	cancelRead context.CancelFunc
	failing    bool
}

// observed is one election with its observers.
type observed struct {
	key       dcsync.Key
	name      string
	gen       uint64  // the latest register generation applied
	cur       *Leader // the leader as of gen; nil when none (free, or pending)
	observers map[*observer]struct{}
}

// observer is one Observe call: what it has been given, and what is queued for it.
type observer struct {
	interval time.Duration
	wake     chan struct{} // buffered 1: the queue grew
	// Guarded by the watcher's mu.
	queue []Leader
	gen   uint64 // the generation of the latest leader queued
	last  Leader // the latest leader queued
	has   bool
}

// watcherOf returns the watcher of m's scope, creating it, and counts a user.
func (m *Manager) watcherOf() *watcher {
	watchers.Lock()
	defer watchers.Unlock()
	w := watchers.m[m.scope]
	if w == nil {
		w = &watcher{scope: m.scope, regs: m.regs, locks: m.store, log: m.log, names: map[dcsync.Key]*observed{}, kick: make(chan struct{}, 1)}
		watchers.m[m.scope] = w
	}
	w.users++
	return w
}

// release ends a use begun by watcherOf.
func (w *watcher) release() {
	watchers.Lock()
	defer watchers.Unlock()
	w.users--
	if w.users == 0 && watchers.m[w.scope] == w {
		delete(watchers.m, w.scope)
	}
}

// lookupWatcher returns the watcher of scope, nil when nobody observes through it.
func lookupWatcher(scope any) *watcher {
	watchers.Lock()
	defer watchers.Unlock()
	return watchers.m[scope]
}

func (w *watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Observe returns a channel of the leaders of election name, in order: the current one
// (within a poll interval), then each new leader and each new value of a leader, as the
// shared watcher of this store value reads them (see the package doc) or as a
// Campaign or Proclaim of this process publishes them. Tokens never go down on it.
// Leaders that led for less than a poll interval may be missed; an observer that
// does not keep up gets every change later, in order (the queue is unbounded). The
// channel is closed when ctx ends. It returns an error only for an invalid name.
func (m *Manager) Observe(ctx context.Context, name string) (<-chan Leader, error) {
	k, err := m.key("election.Observe", name)
	if err != nil {
		return nil, err
	}
	w := m.watcherOf()
	id := identity(k)
	o := &observer{interval: m.poll, wake: make(chan struct{}, 1)}
	w.mu.Lock()
	st := w.names[id]
	if st == nil {
		st = &observed{key: k, name: name, observers: map[*observer]struct{}{}}
		w.names[id] = st
	}
	st.observers[o] = struct{}{}
	if st.cur != nil {
		w.offerLocked(o, *st.cur, st.gen)
	}
	if !w.running {
		w.running = true
		go w.loop()
	}
	w.mu.Unlock()
	w.poke() // this observer's interval may be shorter than the one the loop sleeps for
	out := make(chan Leader)
	go func() {
		defer close(out)
		defer w.leave(id, o)
		for {
			w.mu.Lock()
			var next Leader
			have := len(o.queue) > 0
			if have {
				next = o.queue[0]
			}
			w.mu.Unlock()
			if !have {
				select {
				case <-o.wake:
					continue
				case <-ctx.Done():
					return
				}
			}
			select {
			case out <- next:
				w.mu.Lock()
				o.queue[0] = Leader{}
				o.queue = o.queue[1:]
				w.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// leave takes o out of election id; the loop stops once nobody observes.
func (w *watcher) leave(id dcsync.Key, o *observer) {
	w.mu.Lock()
	if st := w.names[id]; st != nil {
		delete(st.observers, o)
		if len(st.observers) == 0 {
			delete(w.names, id)
		}
	}
	empty := len(w.names) == 0
	if empty && w.cancelRead != nil {
		w.cancelRead()
	}
	w.mu.Unlock()
	if empty {
		w.poke()
	}
	w.release()
}

// offerLocked queues leader (of register generation gen) for o, unless o has been
// given a later generation, or the same leader with the same value, or a newer token.
// w.mu must be held.
func (w *watcher) offerLocked(o *observer, leader Leader, gen uint64) {
	if gen <= o.gen {
		return
	}
	o.gen = gen
	if o.has && (leader.Token < o.last.Token || leader.Token == o.last.Token && leader.Value == o.last.Value) {
		return
	}
	o.last, o.has = leader, true
	o.queue = append(o.queue, leader)
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// applyLocked records what an observation of register generation gen found for
// election id: leader, or nil for none. Observations older than the latest applied
// are dropped. w.mu must be held.
func (w *watcher) applyLocked(id dcsync.Key, gen uint64, leader *Leader) {
	st := w.names[id]
	if st == nil || gen < st.gen {
		return
	}
	st.gen, st.cur = gen, leader
	if leader == nil {
		return
	}
	for o := range st.observers {
		w.offerLocked(o, *leader, gen)
	}
}

// published tells the observers of this process that a leader of this manager wrote
// its record at generation gen: they get it at once, without a read.
func (m *Manager) published(k dcsync.Key, name string, gen, token uint64, value string) {
	w := lookupWatcher(m.scope)
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applyLocked(identity(k), gen, &Leader{Name: name, Token: token, Value: value})
}

func (w *watcher) loop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		w.mu.Lock()
		if len(w.names) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		var interval time.Duration
		for _, st := range w.names {
			for o := range st.observers {
				if interval == 0 || o.interval < interval {
					interval = o.interval
				}
			}
		}
		if wait := time.Until(w.lastRead.Add(interval)); wait > 0 {
			// One pass per interval, whatever kicked the loop.
			w.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-w.kick:
			}
			timer.Stop()
			continue
		}
		w.lastRead = time.Now()
		ids := make([]dcsync.Key, 0, len(w.names))
		keys := make([]dcsync.Key, 0, len(w.names))
		names := make([]string, 0, len(w.names))
		for id, st := range w.names {
			ids, keys, names = append(ids, id), append(keys, st.key), append(names, st.name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		w.cancelRead = cancel
		w.mu.Unlock()

		regs, err := w.regs.ReadRegisters(ctx, keys)
		if err == nil && len(regs) != len(keys) {
			err = driver.Errorf(dcsync.Internal, "election.Observe", "store returned %d registers for %d keys", len(regs), len(keys))
		}
		var locks []driver.LockResult
		if err == nil {
			locks, err = driver.InspectLocks(ctx, w.locks, keys)
			if err == nil && len(locks) != len(keys) {
				err = driver.Errorf(dcsync.Internal, "election.Observe", "store returned %d locks for %d keys", len(locks), len(keys))
			}
		}
		abandoned := ctx.Err() == context.Canceled
		cancel()

		w.mu.Lock()
		w.cancelRead = nil
		var bad error
		if err == nil {
			for i, id := range ids {
				leader, ok, kerr := judgeRead(names[i], regs[i], locks[i])
				if kerr != nil {
					bad = kerr
					continue
				}
				if ok {
					w.applyLocked(id, regs[i].Register.Gen, leader)
				}
			}
		}
		warn := (err != nil || bad != nil) && !abandoned && !w.failing
		recovered := err == nil && bad == nil && w.failing
		w.failing = (err != nil || bad != nil) && !abandoned
		w.mu.Unlock()
		switch {
		case warn:
			if err == nil {
				err = bad
			}
			w.log.Warn("dcsync election watcher: reading elections failed; retrying every poll interval",
				telemetry.LogOperation, "election.observe", "elections", len(keys), telemetry.LogInterval, interval, telemetry.LogErr, err)
		case recovered:
			w.log.Info("dcsync election watcher: reading elections works again", telemetry.LogOperation, "election.observe", "elections", len(keys))
		}
	}
}

// judgeRead returns what one election's reading (register, then lock) shows: a leader,
// or nil for none (the lock free, or its holder not yet published); ok is false when
// the reading says nothing (an error of its own).
func judgeRead(name string, reg driver.RegisterResult, lk driver.LockResult) (leader *Leader, ok bool, err error) {
	if reg.Err != nil {
		return nil, false, reg.Err
	}
	if dcsync.CodeOf(lk.Err) == dcsync.NotFound {
		return nil, true, nil
	}
	if lk.Err != nil {
		return nil, false, lk.Err
	}
	if reg.Register.Gen == 0 {
		return nil, true, nil
	}
	rec, err := decodeRecord(reg.Register.Value)
	if err != nil {
		return nil, false, err
	}
	if rec.token != lk.State.Token {
		return nil, true, nil
	}
	return &Leader{Name: name, Token: rec.token, Value: rec.value}, true, nil
}
