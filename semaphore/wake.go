package semaphore

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
)

// This file holds the process-local registry of acquirers waiting for permits: a
// release in this process (Permits.Release, Manager.Release, a give-back, a lease
// lost) wakes them at once instead of leaving them to sleep out their backoff.

// wakeKey names one semaphore as this process sees it: the store value (or the Manager
// when the store's type cannot key a map) and the semaphore's address (its farm only at
// level DC).
type wakeKey struct {
	scope  any
	level  dcsync.Level
	client string
	farm   string
	name   string
}

var wakers = struct {
	sync.Mutex
	m map[wakeKey][]*waiter
}{m: map[wakeKey][]*waiter{}}

// waiter is one Acquire call (acquirer) or one shrinking Resize waiting in this
// process.
type waiter struct {
	key      wakeKey
	wake     chan struct{}
	acquirer bool
}

func (m *Manager) wakeKey(level dcsync.Level, name string) wakeKey {
	k := wakeKey{scope: m.scope, level: level, client: m.client, farm: m.farm, name: name}
	if level == dcsync.XDC {
		k.farm = ""
	}
	return k
}

// scopeOf returns what keys a manager's waiters: the store value when its type is
// comparable, else the manager itself.
func scopeOf(store any, m *Manager) any {
	if reflect.ValueOf(store).Comparable() {
		return store
	}
	return m
}

func join(k wakeKey) *waiter { return joinAs(k, true) }

// joinAs registers a waiter of k; Waiting counts only acquirers.
func joinAs(k wakeKey, acquirer bool) *waiter {
	w := &waiter{key: k, wake: make(chan struct{}, 1), acquirer: acquirer}
	wakers.Lock()
	wakers.m[k] = append(wakers.m[k], w)
	wakers.Unlock()
	return w
}

func (w *waiter) leave() {
	wakers.Lock()
	defer wakers.Unlock()
	ws := wakers.m[w.key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(wakers.m, w.key)
	} else {
		wakers.m[w.key] = ws
	}
}

// drain drops a pending wake-up: the caller is about to look at the store.
func (w *waiter) drain() {
	select {
	case <-w.wake:
	default:
	}
}

// wake tells every acquirer of k waiting in this process that permits may be free.
func wake(k wakeKey) {
	wakers.Lock()
	defer wakers.Unlock()
	for _, w := range wakers.m[k] {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// pause waits for d, a wake-up (when wakeable), or the end of ctx.
func (w *waiter) pause(ctx context.Context, d time.Duration, wakeable bool) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	var ch chan struct{}
	if wakeable {
		ch = w.wake
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
		return nil
	case <-t.C:
		return nil
	}
}

// Waiting returns how many Acquire calls in this process, through any Manager on this
// semaphore's store value, wait for permits of this semaphore. It does no I/O.
func (s *Semaphore) Waiting() int {
	wakers.Lock()
	defer wakers.Unlock()
	n := 0
	for _, w := range wakers.m[s.wk] {
		if w.acquirer {
			n++
		}
	}
	return n
}
