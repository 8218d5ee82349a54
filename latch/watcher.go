package latch

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
)

// readTimeout bounds one batched read of the watcher.
const readTimeout = 30 * time.Second

// watchers holds the one watcher of each store value.
var watchers = struct {
	sync.Mutex
	m map[dcsync.LatchStore]*watcher
}{m: map[dcsync.LatchStore]*watcher{}}

// watcherFor returns the shared watcher of store, creating it on first use. Stores whose
// dynamic type is not comparable cannot be map keys; they get a watcher of their own.
func watcherFor(store dcsync.LatchStore, log *slog.Logger) *watcher {
	if !reflect.TypeOf(store).Comparable() {
		return newWatcher(store, log)
	}
	watchers.Lock()
	defer watchers.Unlock()
	w := watchers.m[store]
	if w == nil {
		w = newWatcher(store, log)
		watchers.m[store] = w
	}
	return w
}

// watcher serves every Wait on one store. It runs one goroutine, and only while somebody
// waits; each pass reads every awaited latch in one ReadLatches call.
type watcher struct {
	store dcsync.LatchStore
	log   *slog.Logger

	mu      sync.Mutex
	running bool
	kick    chan struct{} // buffered 1: poll now (new latch awaited, or a waiter left)
	latches map[dcsync.Key]*awaited
}

// awaited is one latch with its waiters. Its map key is the latch's identity (the farm
// is dropped at level XDC, where every farm reads the same sum).
type awaited struct {
	key     dcsync.Key // the key to read with
	waiters map[*waiter]struct{}
}

type waiter struct {
	done     chan error // buffered 1; receives the result once
	interval time.Duration
}

func newWatcher(store dcsync.LatchStore, log *slog.Logger) *watcher {
	return &watcher{store: store, log: log, kick: make(chan struct{}, 1), latches: map[dcsync.Key]*awaited{}}
}

func identity(k dcsync.Key) dcsync.Key {
	if k.Level == dcsync.XDC {
		k.Farm = ""
	}
	return k
}

func (w *watcher) wait(ctx context.Context, key dcsync.Key, interval time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	me := &waiter{done: make(chan error, 1), interval: interval}
	id := identity(key)
	w.mu.Lock()
	a := w.latches[id]
	if a == nil {
		a = &awaited{key: key, waiters: map[*waiter]struct{}{}}
		w.latches[id] = a
	}
	a.waiters[me] = struct{}{}
	if !w.running {
		w.running = true
		go w.loop()
	}
	w.mu.Unlock()
	w.poke()

	select {
	case err := <-me.done:
		return err
	case <-ctx.Done():
	}
	w.mu.Lock()
	if a := w.latches[id]; a != nil {
		delete(a.waiters, me)
		if len(a.waiters) == 0 {
			delete(w.latches, id)
		}
	}
	w.mu.Unlock()
	w.poke() // let the loop notice it may have nobody left to serve
	select {
	case err := <-me.done: // finished while we were leaving: report the real result
		return err
	default:
		return ctx.Err()
	}
}

func (w *watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// finish delivers err to every waiter of id and forgets the latch. w.mu must be held.
func (w *watcher) finish(id dcsync.Key, err error) {
	a := w.latches[id]
	if a == nil {
		return
	}
	for wt := range a.waiters {
		wt.done <- err
	}
	delete(w.latches, id)
}

// reached wakes the waiters of key in this process: a local update made its count zero
// or less.
func (w *watcher) reached(key dcsync.Key) {
	w.mu.Lock()
	w.finish(identity(key), nil)
	w.mu.Unlock()
	w.poke() // the loop may have nobody left to serve
}

// snapshot returns the latches to read and the interval to wait, or ok=false (and marks
// the loop stopped) when nobody waits.
func (w *watcher) snapshot() (ids, keys []dcsync.Key, interval time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.latches) == 0 {
		w.running = false
		return nil, nil, 0, false
	}
	for id, a := range w.latches {
		ids = append(ids, id)
		keys = append(keys, a.key)
		for wt := range a.waiters {
			if interval == 0 || wt.interval < interval {
				interval = wt.interval
			}
		}
	}
	return ids, keys, interval, true
}

func (w *watcher) loop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ids, keys, interval, ok := w.snapshot()
		if !ok {
			return
		}
		if !w.poll(ids, keys) {
			return // the poll finished the last waiters
		}
		timer.Reset(interval)
		select {
		case <-timer.C:
		case <-w.kick:
			// Drained: a new latch is awaited or a waiter left; look again now. A
			// burst of new waiters costs one extra read, not one each.
		}
	}
}

// poll reads the latches and finishes the waiters it can. It reports whether anybody
// is still waiting; when nobody is, it marks the loop stopped, under the same lock, so a
// new waiter starts a new loop.
func (w *watcher) poll(ids, keys []dcsync.Key) (more bool) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	counts, err := w.store.ReadLatches(ctx, keys)
	if err == nil && len(counts) != len(keys) {
		err = dcsync.Errorf(dcsync.Internal, "latch.Wait", "store returned %d results for %d keys", len(counts), len(keys))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() {
		if more = len(w.latches) > 0; !more {
			w.running = false
		}
	}()
	if err != nil {
		if dcsync.CodeOf(err) == dcsync.InvalidArgument {
			for _, id := range ids {
				w.finish(id, err)
			}
			return
		}
		// A store outage is not the waiters' failure: keep polling; their contexts
		// bound the wait.
		w.log.Warn("dcsync latch watcher: read failed; retrying", "latches", len(keys), "err", err)
		return
	}
	for i, c := range counts {
		switch {
		case !c.Found:
			w.finish(ids[i], dcsync.Errorf(dcsync.NotFound, "latch.Wait", "latch %s does not exist", keys[i]))
		case c.Count <= 0:
			w.finish(ids[i], nil)
		}
	}
	return
}
