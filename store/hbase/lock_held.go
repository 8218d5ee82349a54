package hbase

import (
	"sync"
	"time"
)

// What a store remembers of the locks it holds, so that a release or a refresh needs no
// read first.
//
// A release or a refresh is a check-and-mutate conditioned on the holder's row as it
// is (ownedBy: its owner, its recorded expiry D:E and its token cell), and writes at
// the version of the holder's cells (their timestamp, r.ts). The acquire or refresh
// that produced that row state knows it: the acquire reads the row back in the same
// call, and a refresh writes the new D:E itself. So each successful acquire or refresh
// remembers the row state here, and the next release or refresh of the same (row,
// owner) sends its check-and-mutate at once. The condition makes a stale memory
// harmless: the row changed since (another store of the process refreshed or released
// it, the lease lapsed and someone else took it, or the same owner took it again with
// another token) means the write is not applied, and the operation falls back to
// reading the row, as it does without a memory.
//
// A refresh also needs the server's time, because the cells keep their version r.ts
// and their TTL counts from it. An anchor bounds it from above without a read: HBase
// stamped a cell (or a clock probe) with its time S while serving a request the client
// sent at C, so at any later client time t the server's time is at most S + (t - C),
// with the two clocks running at the same rate. The refresh's cell TTL is that bound
// minus r.ts plus the lease, plus driftMargin of the time since C (clock rates differ
// by parts per million; NTP slews by at most 500 ppm): the cells never end before the
// lease reported, and end after it by at most the acquire's latency plus that margin.

// maxHeld bounds the locks a store remembers; beyond (once the ended leases are
// dropped), releases and refreshes read first.
const maxHeld = 1 << 16

// driftMargin is the fraction of the time since an anchor added to a refreshed lease's
// cell TTL, for the server's clock running faster than the client's.
const driftMargin = 1000 // 1/1000 = 1000 ppm

// heldLock is a remembered lock row state and its server-clock anchor.
type heldLock struct {
	r       lockRow
	anchorS int64     // a server time, epoch ms
	anchorC time.Time // the client time the request that saw anchorS was sent
}

// cellTTL returns the TTL that makes cells at version h.r.ts end ttl after the server's
// time when a write sent at sent arrives, or a little later (see above).
func (h heldLock) cellTTL(sent time.Time, ttl time.Duration) time.Duration {
	return anchoredTTL(h.anchorS, h.anchorC, h.r.ts, sent, ttl)
}

// anchoredTTL is cellTTL for the anchor (anchorS, anchorC) and cells at version ts.
func anchoredTTL(anchorS int64, anchorC time.Time, ts int64, sent time.Time, ttl time.Duration) time.Duration {
	elapsed := max(sent.Sub(anchorC), 0)
	upper := time.Duration(anchorS-ts)*time.Millisecond + elapsed + elapsed/driftMargin + time.Millisecond
	return max(upper, 0) + ttl
}

// heldLocks is a store's memory of the locks it holds, by row and owner.
type heldLocks struct {
	mu sync.Mutex
	m  map[string]heldLock
}

func heldKey(row []byte, owner string) string { return string(row) + "\x00" + owner }

func (h *heldLocks) remember(row []byte, owner string, l heldLock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]heldLock{}
	}
	k := heldKey(row, owner)
	if _, ok := h.m[k]; !ok && len(h.m) >= maxHeld {
		// Full: drop the leases that have ended (locks lost, or given up without a
		// release through this store).
		now := time.Now()
		for key, e := range h.m {
			if !now.Before(e.r.expires) {
				delete(h.m, key)
			}
		}
	}
	if _, ok := h.m[k]; ok || len(h.m) < maxHeld {
		h.m[k] = l
	}
}

func (h *heldLocks) get(row []byte, owner string) (heldLock, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.m[heldKey(row, owner)]
	return l, ok
}

func (h *heldLocks) forget(row []byte, owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, heldKey(row, owner))
}

// size returns how many locks are remembered (for tests).
func (h *heldLocks) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}
