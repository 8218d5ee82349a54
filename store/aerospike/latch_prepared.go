package aerospike

import (
	"sync"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
)

// A DC count-down sends the same command every time but for its update id: the same
// record key, and a filter whose identity, liveness and range checks depend only on
// the latch, the incarnation this Store knows and the delta. preparedUpdates keeps
// those per latch and delta, the filter's constant part packed once, so that a
// count-down validates the key, computes the record's digest and builds and packs
// those checks only the first time (and again when the incarnation changes). This cut
// the client's share of a DC count-down (docs/benchmarks-aerospike.md).

// maxPrepared bounds the latches whose count-down a Store keeps prepared.
const maxPrepared = 4096

// preparedKey names what a prepared update depends on besides the incarnation.
type preparedKey struct {
	k     dcsync.Key
	delta int64
}

// preparedUpdate is a DC update of one latch and delta, but for its update id.
type preparedUpdate struct {
	key *as.Key // the latch record's key (validated)
	end int64   // the incarnation the filter was built for
	// checks is the filter's constant part: identityOK, dcUpdateAlive at end and the
	// range check of delta, in that order, packed once.
	checks *as.Expression
}

// preparedUpdates caches preparedUpdate by latch and delta. Safe for concurrent use.
type preparedUpdates struct {
	mu sync.Mutex
	m  map[preparedKey]preparedUpdate
}

func (c *preparedUpdates) get(k preparedKey) (preparedUpdate, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.m[k]
	return p, ok
}

func (c *preparedUpdates) put(k preparedKey, p preparedUpdate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxPrepared {
		c.m = map[preparedKey]preparedUpdate{}
	}
	c.m[k] = p
}
