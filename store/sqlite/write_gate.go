package sqlite

import (
	"slices"
	"sync"
)

// writeGate lets one writer of this process at a time into the file (SQLite has one
// writer per file), in order of arrival, except that urgent writers (lease renewals:
// RefreshLock, RefreshLocks) go before every writer still waiting that is not urgent.
// In the queue's scale benchmark (P = 4,096, C = 64, one file) renewals waited behind
// batched takes of thousands of partitions, 3.2 s on average at load 30: leases
// lapsed while their renewal waited, partitions and member slots were lost, and the
// group never settled. A renewal is one short transaction; going first costs the
// others that much.
type writeGate struct {
	mu     sync.Mutex
	held   bool
	urgent []chan struct{} // waiters, in order of arrival
	normal []chan struct{}
}

// acquire waits for the gate, while ctx lasts and done is open. It returns false when
// it gave up (the gate is not held then).
func (g *writeGate) acquire(ctxDone, done <-chan struct{}, urgent bool) bool {
	g.mu.Lock()
	if !g.held {
		g.held = true
		g.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	if urgent {
		g.urgent = append(g.urgent, ch)
	} else {
		g.normal = append(g.normal, ch)
	}
	g.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctxDone:
	case <-done:
	}
	g.mu.Lock()
	if i := slices.Index(g.urgent, ch); i >= 0 {
		g.urgent = slices.Delete(g.urgent, i, i+1)
		g.mu.Unlock()
		return false
	}
	if i := slices.Index(g.normal, ch); i >= 0 {
		g.normal = slices.Delete(g.normal, i, i+1)
		g.mu.Unlock()
		return false
	}
	g.mu.Unlock()
	// Handed the gate as it gave up: pass it on.
	g.release()
	return false
}

// release hands the gate to the next waiter (urgent ones first), or frees it.
func (g *writeGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	var next chan struct{}
	switch {
	case len(g.urgent) > 0:
		next, g.urgent = g.urgent[0], g.urgent[1:]
	case len(g.normal) > 0:
		next, g.normal = g.normal[0], g.normal[1:]
	default:
		g.held = false
		return
	}
	close(next)
}
