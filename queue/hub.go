package queue

// The hub: one shared watcher per (store value, queue) in a process.
//
// Invariants kept here, each with the test that fails when it is broken:
//
//   - Idle consumers of one queue share one watcher that reads the bounds of every
//     partition they wait on in one batched call per poll interval at most, not one
//     read per consumer or per partition, and back off to one per idleBackoff
//     intervals while nothing changes. TestIdleConsumersShareOneWatcher,
//     TestIdleHubBacksOff.
//   - The hub only wakes consumers; it never delivers, acks or commits, so nothing it
//     does (a missed or spurious wake-up) can break an exactly-once invariant of the
//     files above: a missed wake-up costs at most one poll interval.

import (
	"context"
	"sync"
	"time"

	"github.com/dcsync/dcsync/driver"
)

// A hub is the shared watcher of one queue in one store value: while any consumer of the
// process waits, one goroutine reads the bounds of every partition the waiting
// consumers own in one batched call, and wakes the consumers that are behind. It reads
// again an eighth of a poll interval after a read that found new events or after a
// poke (a consumer starting to wait after it was busy, a partition taken), then backs
// off, doubling the wait while reads find nothing new, up to idleBackoff poll
// intervals. Enqueues in the same process wake the owners of their partitions at once,
// with no read.
// idleBackoff bounds the hub's backoff, in poll intervals: while nothing changes the
// hub reads once per idleBackoff intervals, so an event from another process reaches
// an idle consumer within that long.
const idleBackoff = 8

type hub struct {
	store    driver.Store
	name     string
	interval time.Duration

	mu      sync.Mutex
	subs    map[*Consumer]struct{}
	running bool
	kick    chan struct{}
}

type hubKey struct {
	store driver.Store
	name  string
}

var hubs = struct {
	sync.Mutex
	m map[hubKey]*hub
}{m: map[hubKey]*hub{}}

// subscribe adds c to the process's hub of (s, name), creating the hub if needed, and
// returns it; the hub's goroutine runs while it has subscribers, and the hub leaves
// the registry with its last subscriber. Store values that cannot be a map key
// (keyable) get a hub per consumer (they miss the local wake-ups of other handles'
// enqueues).
func subscribe(s driver.Store, name string, interval time.Duration, c *Consumer) *hub {
	hubs.Lock()
	defer hubs.Unlock()
	var h *hub
	if keyable(s) {
		k := hubKey{s, name}
		if h = hubs.m[k]; h == nil {
			h = newHub(s, name, interval)
			hubs.m[k] = h
		}
	} else {
		h = newHub(s, name, interval)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[c] = struct{}{}
	if !h.running {
		h.running = true
		go h.run()
	}
	return h
}

// lookupHub returns the process's hub of (s, name), or nil when no consumer of it
// runs in this process.
func lookupHub(s driver.Store, name string) *hub {
	if !keyable(s) {
		return nil
	}
	hubs.Lock()
	defer hubs.Unlock()
	return hubs.m[hubKey{s, name}]
}

func newHub(s driver.Store, name string, interval time.Duration) *hub {
	return &hub{store: s, name: name, interval: interval, subs: map[*Consumer]struct{}{}, kick: make(chan struct{}, 1)}
}

func (h *hub) unsubscribe(c *Consumer) {
	h.mu.Lock()
	delete(h.subs, c)
	h.mu.Unlock()
	h.poke()
}

// idle ends the hub when it has no subscribers: it leaves the registry (under the
// registry's lock, so that no subscribe can pick it up meanwhile).
func (h *hub) idle() bool {
	hubs.Lock()
	defer hubs.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) > 0 {
		return false
	}
	h.running = false
	if k := (hubKey{h.store, h.name}); keyable(h.store) && hubs.m[k] == h {
		delete(hubs.m, k)
	}
	return true
}

// poke asks for a read now (still at most one per minimum interval).
func (h *hub) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func (h *hub) snapshot() []*Consumer {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Consumer, 0, len(h.subs))
	for c := range h.subs {
		out = append(out, c)
	}
	return out
}

// appended wakes the local owners of partitions ps.
func (h *hub) appended(ps []int) {
	if len(ps) == 0 {
		return
	}
	for _, c := range h.snapshot() {
		c.observeLocal(ps)
	}
}

func (h *hub) run() {
	minWait := h.interval / 8
	maxWait := idleBackoff * h.interval
	wait := h.interval
	last := time.Time{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-h.kick:
			// A new waiter, a partition taken: read soon, but not more often than
			// minWait, and start backing off again from there.
			wait = minWait
			if d := minWait - time.Since(last); d > 0 {
				timer.Reset(d)
				<-timer.C
			}
		}
		if h.idle() {
			return
		}
		subs := h.snapshot()
		want := map[int]bool{}
		for _, c := range subs {
			for _, p := range c.waitingFor() {
				want[p] = true
			}
		}
		if len(want) == 0 {
			wait = h.interval
			timer.Reset(wait)
			continue
		}
		ps := make([]int, 0, len(want))
		for p := range want {
			ps = append(ps, p)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*h.interval+5*time.Second)
		bounds, err := h.store.QueueBounds(ctx, h.name, ps)
		cancel()
		last = time.Now()
		progressed := false
		if err == nil {
			by := make(map[int]driver.QueueBounds, len(ps))
			for i, p := range ps {
				by[p] = bounds[i]
			}
			for _, c := range subs {
				if c.observe(by) {
					progressed = true
				}
			}
		}
		if progressed {
			wait = minWait
		} else {
			// Nothing new: back off, doubling up to idleBackoff poll intervals.
			wait = min(wait*2, maxWait)
		}
		timer.Reset(wait)
	}
}
