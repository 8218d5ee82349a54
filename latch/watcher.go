package latch

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/telemetry"
)

// readTimeout bounds one pass of the watcher's reads.
const readTimeout = 30 * time.Second

// closeNotifier is implemented by stores that report their Close: Done returns a
// channel that Close closes. The watcher of such a store ends every Wait with a
// Connection error at once when the store closes. Without it, a closed store is noticed
// only through its reads failing for good (SQLite) or not at all (a store that fails
// reads with Connection, which is retried): then each Wait ends with its ctx.
type closeNotifier interface {
	Done() <-chan struct{}
}

// epochs numbers, across all watchers, every arrival of a waiter and every observation
// of the store: a batched read or a local update. A waiter records the number current
// when it arrives (since); an observation takes a new, larger number before it looks at
// the store, and may only finish waiters whose since is smaller: a read or update begun
// before a Wait began says nothing about the count during that Wait.
var epochs atomic.Uint64

// watchers holds the shared watcher of each store value while it is in use, and for up
// to one poll interval after its last read, so that waiters that come and go cannot make
// it read more often than once per interval. Closed stores are dropped at once.
var watchers = struct {
	sync.Mutex
	m map[driver.LatchStore]*watcher
}{m: map[driver.LatchStore]*watcher{}}

// shareable reports whether store can key the watcher map. A store whose dynamic type is
// not comparable gets a watcher per Manager instead.
func shareable(store driver.LatchStore) bool { return reflect.TypeOf(store).Comparable() }

// acquireWatcher returns the shared watcher of store, creating it if needed, and counts
// the caller as a user until it calls release.
func acquireWatcher(store driver.LatchStore, log *slog.Logger, tel telemetry.Scope) *watcher {
	watchers.Lock()
	defer watchers.Unlock()
	w := watchers.m[store]
	if w == nil {
		w = newWatcher(store, log, tel)
		if w.isClosed() {
			return w // serves this Wait (which fails at once); not worth keeping
		}
		watchers.m[store] = w
	}
	w.users++
	return w
}

// lookupWatcher returns the shared watcher of store, or nil when nobody waits on it.
func lookupWatcher(store driver.LatchStore) *watcher {
	watchers.Lock()
	defer watchers.Unlock()
	return watchers.m[store]
}

// release ends a use begun by acquireWatcher. When the last user leaves, the watcher is
// dropped once its rate limit no longer matters (one interval after its last read), or at
// once when its store is closed.
func (w *watcher) release() {
	watchers.Lock()
	defer watchers.Unlock()
	w.users--
	if w.users > 0 || watchers.m[w.store] != w {
		return
	}
	w.mu.Lock()
	left := time.Until(w.lastRead.Add(w.lastInterval))
	w.mu.Unlock()
	if left <= 0 || w.isClosed() {
		delete(watchers.m, w.store)
		return
	}
	if w.expiry == nil {
		w.expiry = time.AfterFunc(left, w.expire)
	} else {
		w.expiry.Reset(left)
	}
}

// expire drops an idle watcher from the map.
func (w *watcher) expire() {
	watchers.Lock()
	defer watchers.Unlock()
	if w.users == 0 && watchers.m[w.store] == w {
		delete(watchers.m, w.store)
	}
}

// forget drops w from the map, whoever uses it: its store is closed.
func (w *watcher) forget() {
	watchers.Lock()
	defer watchers.Unlock()
	if watchers.m[w.store] == w {
		delete(watchers.m, w.store)
	}
}

// watcher serves every Wait on one store. It runs one goroutine, and only while somebody
// waits. Each pass reads every awaited latch in one ReadLatches call, and passes start at
// least the shortest current waiter's interval apart, however waiters come and go.
type watcher struct {
	store  driver.LatchStore
	log    *slog.Logger
	tel    telemetry.Scope // of the manager that made the watcher
	closed <-chan struct{} // the store's Done channel; nil (never ready) if it has none

	// Guarded by the watchers lock.
	users  int         // Waits using this watcher
	expiry *time.Timer // drops the idle watcher from the map

	mu           sync.Mutex
	running      bool
	kick         chan struct{} // buffered 1: look at the schedule again (never reads early)
	latches      map[dcsync.Key]*awaited
	lastRead     time.Time     // when the last pass began
	lastInterval time.Duration // the interval in force then
	cancelRead   context.CancelFunc
	failing      bool // the last pass failed in a way worth a warning
}

// awaited is one latch with its waiters. Its map key is the latch's identity (the farm
// is dropped at level XDC, where every farm reads the same sum).
type awaited struct {
	key     dcsync.Key // the key to read with
	waiters map[*waiter]struct{}
	seen    bool  // count holds the last count read
	count   int64 //
	lastErr error // the last read's transient error; nil after a good read
}

type waiter struct {
	done     chan error // buffered 1; receives the result once
	interval time.Duration
	since    uint64 // epochs when the waiter arrived
	// Set by finish before it sends a nil result: when the observation that ended the
	// wait was made (zero if unknown), and by what (telemetry.SourceRead or SourceUpdate).
	observed time.Time
	source   string
}

func newWatcher(store driver.LatchStore, log *slog.Logger, tel telemetry.Scope) *watcher {
	w := &watcher{store: store, log: log, tel: tel, kick: make(chan struct{}, 1), latches: map[dcsync.Key]*awaited{}}
	if c, ok := store.(closeNotifier); ok {
		w.closed = c.Done()
	}
	return w
}

func (w *watcher) isClosed() bool {
	select {
	case <-w.closed:
		return true
	default:
		return false
	}
}

func identity(k dcsync.Key) dcsync.Key {
	if k.Level == dcsync.XDC {
		k.Farm = ""
	}
	return k
}

// wait waits for key; tel is the waiting manager's telemetry, which records the
// wake-up delay.
func (w *watcher) wait(ctx context.Context, key dcsync.Key, interval time.Duration, tel telemetry.Scope) error {
	woken := func(me *waiter, err error) error {
		if err == nil && !me.observed.IsZero() {
			tel.Woken(ctx, key.Level, me.source, me.observed)
		}
		return err
	}
	if ctx.Err() != nil {
		return gaveUp(ctx, key, nil)
	}
	if w.isClosed() {
		return closedErr(key)
	}
	id := identity(key)
	w.mu.Lock()
	me := &waiter{done: make(chan error, 1), interval: interval, since: epochs.Load()}
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
	w.poke() // this waiter's interval may be shorter than the one the loop sleeps for

	select {
	case err := <-me.done:
		return woken(me, err)
	case <-ctx.Done():
	case <-w.closed:
	}
	// Leave. Leaving never causes a read; when nobody is left, the loop is told to stop
	// and its read in flight, if any, is cancelled.
	w.mu.Lock()
	var last *awaited
	if a := w.latches[id]; a != nil {
		if _, ok := a.waiters[me]; ok {
			c := *a
			last = &c
		}
		delete(a.waiters, me)
		if len(a.waiters) == 0 {
			delete(w.latches, id)
		}
	}
	empty := len(w.latches) == 0
	if empty && w.cancelRead != nil {
		w.cancelRead()
	}
	w.mu.Unlock()
	if empty {
		w.poke()
	}
	select {
	case err := <-me.done: // finished while we were leaving: report the real result
		return woken(me, err)
	default:
	}
	if ctx.Err() != nil {
		return gaveUp(ctx, key, last)
	}
	return closedErr(key)
}

// gaveUp is Wait's error when ctx ends first: a *dcsync.Error with code RetriesExhausted
// (the wait polled the latch until its budget ran out), matching ctx's error with
// errors.Is and, if the store was failing at the last read, the store's error too.
func gaveUp(ctx context.Context, key dcsync.Key, a *awaited) error {
	msg := fmt.Sprintf("gave up waiting for latch %s to reach zero", key)
	cause := causes{ctx.Err()}
	if c := context.Cause(ctx); c != nil && c != ctx.Err() {
		cause = append(cause, c)
	}
	if a != nil && a.seen {
		msg += fmt.Sprintf(" (count %d at the last read)", a.count)
	}
	if a != nil && a.lastErr != nil {
		msg += "; the store was failing"
		cause = append(cause, a.lastErr)
	}
	var err error = cause
	if len(cause) == 1 {
		err = cause[0]
	}
	return &dcsync.Error{Code: dcsync.RetriesExhausted, Op: "latch.Wait", Msg: msg, Err: err}
}

// causes is several causes of one error, printed on one line.
type causes []error

func (c causes) Error() string {
	s := make([]string, len(c))
	for i, e := range c {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (c causes) Unwrap() []error { return c }

func closedErr(key dcsync.Key) error {
	return driver.Errorf(dcsync.Connection, "latch.Wait", "the store was closed while waiting for latch %s", key)
}

func (w *watcher) stats() WatcherStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := WatcherStats{Latches: len(w.latches)}
	for _, a := range w.latches {
		st.Waits += len(a.waiters)
	}
	return st
}

func (w *watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// finish delivers err to the waiters of id that arrived before the observation numbered
// epoch, made at observed by source, and forgets the latch when none is left. w.mu
// must be held.
func (w *watcher) finish(id dcsync.Key, epoch uint64, err error, observed time.Time, source string) {
	a := w.latches[id]
	if a == nil {
		return
	}
	for wt := range a.waiters {
		if wt.since < epoch {
			wt.observed, wt.source = observed, source
			wt.done <- err
			delete(a.waiters, wt)
		}
	}
	if len(a.waiters) == 0 {
		delete(w.latches, id)
	}
}

// reached wakes the waiters of key in this process that arrived before the local update
// numbered epoch began: that update made the count zero or less.
func (w *watcher) reached(key dcsync.Key, epoch uint64, observed time.Time) {
	w.mu.Lock()
	w.finish(identity(key), epoch, nil, observed, telemetry.SourceUpdate)
	empty := len(w.latches) == 0
	w.mu.Unlock()
	if empty {
		w.poke() // let the loop stop
	}
}

func (w *watcher) loop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		w.mu.Lock()
		if w.isClosed() {
			for id := range w.latches {
				w.finish(id, ^uint64(0), closedErr(w.latches[id].key), time.Time{}, "")
			}
			w.running = false
			w.mu.Unlock()
			w.forget()
			return
		}
		if len(w.latches) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		var interval time.Duration
		for _, a := range w.latches {
			for wt := range a.waiters {
				if interval == 0 || wt.interval < interval {
					interval = wt.interval
				}
			}
		}
		if wait := time.Until(w.lastRead.Add(interval)); wait > 0 {
			// Rate limit: one pass per interval, whatever kicked us.
			w.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-w.kick:
			case <-w.closed:
			}
			timer.Stop()
			continue
		}
		epoch := epochs.Add(1)
		w.lastRead, w.lastInterval = time.Now(), interval
		ids := make([]dcsync.Key, 0, len(w.latches))
		keys := make([]dcsync.Key, 0, len(w.latches))
		for id, a := range w.latches {
			ids = append(ids, id)
			keys = append(keys, a.key)
		}
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		w.cancelRead = cancel
		w.mu.Unlock()

		w.tel.WatcherBatch(ctx, len(keys))
		counts, errs, batchErr := w.read(ctx, keys)
		observed := time.Now()
		abandoned := ctx.Err() == context.Canceled // every waiter left mid-read
		cancel()

		w.mu.Lock()
		w.cancelRead = nil
		w.apply(epoch, observed, ids, keys, counts, errs)
		warn := batchErr != nil && !abandoned && !w.failing
		recovered := batchErr == nil && w.failing
		w.failing = batchErr != nil && !abandoned
		w.mu.Unlock()
		switch {
		case warn:
			w.log.Warn("dcsync latch watcher: reading latches failed; retrying every poll interval",
				telemetry.LogStore, w.tel.Store, telemetry.LogOperation, "latch.wait",
				telemetry.LogLatches, len(keys), telemetry.LogInterval, interval, telemetry.LogErr, batchErr)
		case recovered:
			w.log.Info("dcsync latch watcher: reading latches works again",
				telemetry.LogStore, w.tel.Store, telemetry.LogOperation, "latch.wait", telemetry.LogLatches, len(keys))
		}
	}
}

// transient reports whether a read error may go away by itself (the store is
// unreachable, or the outcome is unknown): the waiters then keep waiting, bounded by
// their contexts. Any other error is the latch's failure and ends its waiters.
func transient(err error) bool {
	switch dcsync.CodeOf(err) {
	case dcsync.Connection, dcsync.RetriesExhausted:
		return true
	}
	return false
}

// read reads keys in one call. When that call fails for a reason other than an outage,
// it reads the keys one by one, so that one key the store cannot read (invalid, an
// unreadable cell) fails only its own waiters. errs[i] is key i's error, if any;
// batchErr is the batch's transient error, if any, for the log.
func (w *watcher) read(ctx context.Context, keys []dcsync.Key) (counts []driver.LatchCount, errs []error, batchErr error) {
	errs = make([]error, len(keys))
	counts, err := w.readSome(ctx, keys)
	if err == nil {
		return counts, errs, nil
	}
	if transient(err) || len(keys) == 1 {
		for i := range errs {
			errs[i] = err
		}
		if transient(err) {
			batchErr = err
		}
		return nil, errs, batchErr
	}
	counts = make([]driver.LatchCount, len(keys))
	for i := range keys {
		c, err := w.readSome(ctx, keys[i:i+1])
		if err != nil {
			errs[i] = err
			if transient(err) {
				batchErr = err
			}
			continue
		}
		counts[i] = c[0]
	}
	return counts, errs, batchErr
}

func (w *watcher) readSome(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	start := time.Now()
	counts, err := w.store.ReadLatches(ctx, keys)
	w.tel.WatcherRead(ctx)
	w.tel.StoreCall(ctx, "read_latches", start, err)
	if err == nil && len(counts) != len(keys) {
		err = driver.Errorf(dcsync.Internal, "latch.Wait", "store returned %d results for %d keys", len(counts), len(keys))
	}
	return counts, err
}

// apply finishes the waiters the pass numbered epoch can finish. w.mu must be held.
func (w *watcher) apply(epoch uint64, observed time.Time, ids, keys []dcsync.Key, counts []driver.LatchCount, errs []error) {
	for i, id := range ids {
		a := w.latches[id]
		if a == nil {
			continue
		}
		switch err := errs[i]; {
		case err != nil && transient(err):
			a.lastErr = err
		case err != nil:
			w.finish(id, epoch, driver.Wrap(err, dcsync.Internal, "latch.Wait"), observed, telemetry.SourceRead)
		case !counts[i].Found:
			w.finish(id, epoch, driver.Errorf(dcsync.NotFound, "latch.Wait", "latch %s does not exist", keys[i]), observed, telemetry.SourceRead)
		case counts[i].Count <= 0:
			w.finish(id, epoch, nil, observed, telemetry.SourceRead)
		default:
			a.seen, a.count, a.lastErr = true, counts[i].Count, nil
		}
	}
}
