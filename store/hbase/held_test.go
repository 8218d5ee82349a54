package hbase

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// storeOps is every call a Store makes to HBase: for its locks and latches (ops) and
// for its queues (queueOps). The test wrappers of the client embed it.
type storeOps interface {
	ops
	queueOps
}

// heldWrites wraps the real client below the store's retries and holds back the
// conditional write (CheckAndMutate or CheckAndMutateRead) it is armed for (holdAfter):
// the write is not sent, its caller sees "outcome unknown" (a request that timed out
// while still queued at the server) and retries, and the write is kept exactly as the
// store sent it, to reach the server later, after whatever the caller did meanwhile: a
// first try that lands late (docs/stores/hbase.md, "Writes that land late"; issue 14's
// defect 1). Held writes are sent by deliver or, when late is set, just before the
// next conditional write (the caller's resend), so that a read-back in between finds
// nothing and the resend meets the write applied.
type heldWrites struct {
	storeOps
	late bool

	mu     sync.Mutex
	armed  bool
	row    []byte // the row armed for; nil: any row
	skip   int    // conditional writes of row still to let pass before the one held
	held   []func(context.Context) (bool, error)
	onHold func() // run once, when a write is held, before its caller sees the error
}

// holdWrites makes s's calls to HBase (for locks, latches and queues) go through a
// heldWrites; late: see heldWrites. s is closed when the test ends.
func holdWrites(t *testing.T, s *Store, late bool) *heldWrites {
	t.Cleanup(func() { s.Close() })
	h := &heldWrites{storeOps: s.client, late: late}
	s.db = h
	s.queue().db = h
	return h
}

// holdAfter arms h: of the conditional writes of row (nil: of any row), it lets the next
// skip pass and holds the one after.
func (h *heldWrites) holdAfter(skip int, row []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.row, h.skip = true, row, skip
}

// take returns the held writes, oldest first, and forgets them.
func (h *heldWrites) take() []func(context.Context) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	held := h.held
	h.held = nil
	return held
}

// hold reports whether a conditional write of row is to be held, and keeps send if so.
func (h *heldWrites) hold(row []byte, send func(context.Context) (bool, error)) bool {
	if h.late {
		for _, s := range h.take() {
			_, _ = s(context.Background())
		}
	}
	h.mu.Lock()
	if !h.armed || h.row != nil && !bytes.Equal(h.row, row) {
		h.mu.Unlock()
		return false
	}
	if h.skip > 0 {
		h.skip--
		h.mu.Unlock()
		return false
	}
	h.armed = false
	h.held = append(h.held, send)
	onHold := h.onHold
	h.onHold = nil
	h.mu.Unlock()
	if onHold != nil {
		onHold()
	}
	// Let the clock move on, so that the retry's expiry differs from the held write's.
	time.Sleep(5 * time.Millisecond)
	return true
}

// deliver sends the held writes, oldest first, and returns whether each was applied.
func (h *heldWrites) deliver(t *testing.T) []bool {
	t.Helper()
	held := h.take()
	if len(held) == 0 {
		t.Fatal("no write was held")
	}
	out := make([]bool, len(held))
	for i, send := range held {
		ok, err := send(ctxT(t, time.Minute))
		must(t, err, "delivering a held write")
		out[i] = ok
	}
	return out
}

func (h *heldWrites) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	if h.hold(row, func(ctx context.Context) (bool, error) {
		ok, _, err := h.storeOps.CheckAndMutate(ctx, table, row, cond, muts...)
		return ok, err
	}) {
		return false, nil, errUnknown()
	}
	return h.storeOps.CheckAndMutate(ctx, table, row, cond, muts...)
}

func (h *heldWrites) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error) {
	if h.hold(row, func(ctx context.Context) (bool, error) {
		ok, _, _, err := h.storeOps.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
		return ok, err
	}) {
		return false, nil, nil, errUnknown()
	}
	return h.storeOps.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
}
