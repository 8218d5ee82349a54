package hbase

import (
	"context"
	"sync"

	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// counting wraps the real client and counts the calls a store makes to HBase (each is
// one round trip), by method.
type counting struct {
	storeOps
	mu    sync.Mutex
	calls map[string]int
}

// countCalls makes s's calls to HBase (for locks, latches and queues) go through a
// counting.
func countCalls(s *Store) *counting {
	c := &counting{storeOps: s.client, calls: map[string]int{}}
	s.db = c
	s.queue().db = c
	return c
}

func (c *counting) count(m string) {
	c.mu.Lock()
	c.calls[m]++
	c.mu.Unlock()
}

// take returns the calls counted since the last take.
func (c *counting) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int{}
	return out
}

func (c *counting) Get(ctx context.Context, table string, row []byte, cols ...hbaserpc.Column) ([]hbaserpc.Cell, error) {
	c.count("Get")
	return c.storeOps.Get(ctx, table, row, cols...)
}

func (c *counting) MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error) {
	c.count("MultiGet")
	return c.storeOps.MultiGet(ctx, table, gets)
}

func (c *counting) Increment(ctx context.Context, table string, inc *hbaserpc.Increment) ([]hbaserpc.Cell, error) {
	c.count("Increment")
	return c.storeOps.Increment(ctx, table, inc)
}

func (c *counting) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	c.count("CheckAndMutate")
	return c.storeOps.CheckAndMutate(ctx, table, row, cond, muts...)
}

func (c *counting) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error) {
	c.count("CheckAndMutateRead")
	return c.storeOps.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
}

func (c *counting) GetWithClock(ctx context.Context, table string, row, probeFamily []byte, cols ...hbaserpc.Column) ([]hbaserpc.Cell, int64, error) {
	c.count("GetWithClock")
	return c.storeOps.GetWithClock(ctx, table, row, probeFamily, cols...)
}

func (c *counting) MultiMutate(ctx context.Context, table string, actions []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	c.count("MultiMutate")
	return c.storeOps.MultiMutate(ctx, table, actions)
}

func (c *counting) ScanFunc(ctx context.Context, table string, s hbaserpc.Scan, fn func(hbaserpc.Row) error) error {
	c.count("ScanFunc")
	return c.storeOps.ScanFunc(ctx, table, s, fn)
}

// CheckAndMutateGets is the call of an acquire with the raw read (rawGetOps).
func (c *counting) CheckAndMutateGets(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, gets ...hbaserpc.Get) (bool, []hbaserpc.Cell, [][]hbaserpc.Cell, error) {
	c.count("CheckAndMutateGets")
	return c.storeOps.(rawGetOps).CheckAndMutateGets(ctx, table, row, cond, muts, gets...)
}
