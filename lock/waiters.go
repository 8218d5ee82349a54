package lock

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// This file holds the process-local registry of acquirers waiting for a lock: it lets a
// release in this process wake them at once, and it queues fair acquirers (see
// "Fairness" in the package doc).

// lockID names one lock in a store: an XDC lock has one holder across farms, so its
// farm is not part of its name (the stores key XDC locks without the farm).
type lockID struct {
	level  dcsync.Level
	client string
	farm   string
	name   string
}

func idOf(k dcsync.Key) lockID {
	id := lockID{level: k.Level, client: k.Client, farm: k.Farm, name: k.Name}
	if k.Level == dcsync.XDC {
		id.farm = ""
	}
	return id
}

// queueKey names one lock as this process sees it: its id, and the store value (or the
// Manager, when the store's type cannot key a map) the waiters use. Managers on one
// store value share a queue; two store values are two processes to each other, even
// when they open the same database.
type queueKey struct {
	scope any
	id    lockID
}

// tickets numbers, across all queues, every arrival of an acquirer. A fair acquisition
// records the latest number issued when its batch began: the acquirers with a number up
// to it were waiting then.
var tickets atomic.Uint64

// queues holds the queue of each lock while acquirers in this process wait for it, and
// after the release of a fair acquisition for as long as its yield lasts.
var queues = struct {
	sync.Mutex
	m map[queueKey]*queue
}{m: map[queueKey]*queue{}}

// queue is the process-local state of one lock. Its fields are guarded by queues.
type queue struct {
	key     queueKey
	waiters []*waiter // in arrival order, fair and not
	// taken is set when a fair acquirer of this process took the lock, and cleared by
	// the next release or lease loss in this process: while it is set the next fair
	// acquirer need not ask the store before it is woken or its backoff runs out.
	taken bool
	// batch is the batch of the latest fair acquisition released here: acquirers with
	// a ticket up to it take the lock without yielding.
	batch uint64
	// yieldEnd is when the yield after that release ends: until then fair acquirers of
	// a later batch leave the lock to other processes.
	yieldEnd time.Time
	expiry   *time.Timer // drops the queue once nobody waits and the yield is over
}

// waiter is one Acquire call in a queue.
type waiter struct {
	q      *queue
	ticket uint64
	fair   bool
	wake   chan struct{} // a release in this process (or, fair, a turn) to look at
	gone   bool          // guarded by queues
}

// scope returns what keys this manager's queues: the store value when its type is
// comparable, else the manager itself.
func (m *Manager) scope() any {
	if m.shared {
		return m.store
	}
	return m
}

// shareable reports whether store can key the queue map: its value is comparable (a
// struct holding an interface is comparable only if the value it holds is).
func shareable(store driver.LockStore) bool { return reflect.ValueOf(store).Comparable() }

// join queues an Acquire of k.
func (m *Manager) join(k dcsync.Key, fair bool) *waiter {
	key := queueKey{scope: m.scope(), id: idOf(k)}
	queues.Lock()
	defer queues.Unlock()
	q := queues.m[key]
	if q == nil {
		q = &queue{key: key}
		queues.m[key] = q
	}
	w := &waiter{q: q, ticket: tickets.Add(1), fair: fair, wake: make(chan struct{}, 1)}
	q.waiters = append(q.waiters, w)
	return w
}

// signal wakes w unless a wake-up is already pending.
func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// drain drops a pending wake-up: the caller is about to look at the store, which sees
// every release made before.
func (w *waiter) drain() {
	select {
	case <-w.wake:
	default:
	}
}

// view is what a fair waiter needs to know of its queue.
type view struct {
	ahead int           // fair waiters that arrived earlier and still wait
	yield time.Duration // how long this process still leaves the lock to others (0: none)
	taken bool          // a fair acquirer of this process holds the lock
}

func (w *waiter) view() view {
	queues.Lock()
	defer queues.Unlock()
	q := w.q
	var v view
	for _, x := range q.waiters {
		if x == w {
			break
		}
		if x.fair {
			v.ahead++
		}
	}
	if w.ticket > q.batch {
		v.yield = max(time.Until(q.yieldEnd), 0)
	}
	v.taken = q.taken
	return v
}

// leave takes w out of its queue; a fair waiter that was first wakes the next one.
func (w *waiter) leave() {
	queues.Lock()
	defer queues.Unlock()
	w.leaveLocked()
}

func (w *waiter) leaveLocked() {
	if w.gone {
		return
	}
	w.gone = true
	q := w.q
	first := true
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			break
		}
		if x.fair {
			first = false
		}
	}
	if w.fair && first {
		q.wakeFirstFairLocked()
	}
	q.tidyLocked()
}

// took records that w, a fair waiter, acquired l, and leaves the queue. l joins the
// batch of the latest release when w was waiting then; otherwise it begins a new batch
// of every acquirer that is waiting now.
func (w *waiter) took(l *Lock) {
	queues.Lock()
	defer queues.Unlock()
	q := w.q
	l.fair = true
	if w.ticket <= q.batch {
		l.batch = q.batch
	} else {
		l.batch = tickets.Load()
	}
	q.taken = true
	w.leaveLocked()
}

func (q *queue) wakeFirstFairLocked() {
	for _, x := range q.waiters {
		if x.fair {
			x.signal()
			return
		}
	}
}

// tidyLocked drops q once nobody waits and its yield is over, or arranges for that.
func (q *queue) tidyLocked() {
	if len(q.waiters) > 0 || queues.m[q.key] != q {
		return
	}
	left := time.Until(q.yieldEnd)
	if left <= 0 {
		delete(queues.m, q.key)
		return
	}
	if q.expiry == nil {
		q.expiry = time.AfterFunc(left, q.expire)
	} else {
		q.expiry.Reset(left)
	}
}

func (q *queue) expire() {
	queues.Lock()
	defer queues.Unlock()
	q.tidyLocked()
}

// freed tells the acquirers of k waiting in this process that the lock may be free: it
// was released, or a lease on it was lost. Every non-fair waiter and the first fair one
// look at the store again at once. When l (nil for Manager.Release) was taken by a fair
// Acquire, fair acquirers that did not wait when its batch began hold off for the
// yield of l's manager.
func (m *Manager) freed(k dcsync.Key, l *Lock) {
	key := queueKey{scope: m.scope(), id: idOf(k)}
	fair := l != nil && l.fair
	queues.Lock()
	defer queues.Unlock()
	q := queues.m[key]
	if q == nil {
		if !fair || m.yield <= 0 {
			return
		}
		q = &queue{key: key}
		queues.m[key] = q
	}
	q.taken = false
	if fair {
		q.batch = max(q.batch, l.batch)
		if end := time.Now().Add(m.yield); end.After(q.yieldEnd) {
			q.yieldEnd = end
		}
	}
	for _, x := range q.waiters {
		if !x.fair {
			x.signal()
		}
	}
	q.wakeFirstFairLocked()
	q.tidyLocked()
}

// pause waits until w is woken, d has passed (d < 0: no timer), the wait ends at
// deadline, or ctx ends. over reports that the wait ended first: d < 0 or d reached
// past the deadline.
func (w *waiter) pause(ctx context.Context, d time.Duration, deadline time.Time) (over bool, err error) {
	left := time.Until(deadline)
	if d < 0 || d > left {
		d, over = left, true
	}
	if d <= 0 && over {
		return true, ctx.Err()
	}
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-w.wake:
		return false, nil
	case <-t.C:
		return over, nil
	}
}

// Waiting returns how many Acquire calls in this process, through any Manager on this
// manager's store value, are waiting for the lock name (at the level of opts, the
// manager's default if unset). It does no I/O. Acquirers in other processes, or on
// another store value, are not counted.
func (m *Manager) Waiting(name string, opts ...CallOption) int {
	k, _, err := m.spec(name, opts)
	if err != nil {
		return 0
	}
	key := queueKey{scope: m.scope(), id: idOf(k)}
	queues.Lock()
	defer queues.Unlock()
	if q := queues.m[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}
