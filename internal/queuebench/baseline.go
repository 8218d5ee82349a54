package queuebench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// BaselineRaw is a Raw made of a store's driver.QueueBaseline, the raw floor that
// `dcsync bench` measures too: writer or reader i works on the rows of a baseline of
// its own (prefix-i), made at its first call. Close deletes every baseline's rows.
type BaselineRaw struct {
	bl     driver.Baseliner
	prefix string
	mu     sync.Mutex
	bs     map[int]driver.QueueBaseline
	all    []driver.Baseline
}

// NewBaselineRaw returns a BaselineRaw on bl's baselines, named prefix-i.
func NewBaselineRaw(bl driver.Baseliner, prefix string) *BaselineRaw {
	return &BaselineRaw{bl: bl, prefix: prefix, bs: map[int]driver.QueueBaseline{}}
}

// of returns index i's baseline. Split gives each index to one goroutine at a time,
// so a baseline (not safe for concurrent use) is never used by two at once.
func (x *BaselineRaw) of(ctx context.Context, i int) (driver.QueueBaseline, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if q, ok := x.bs[i]; ok {
		return q, nil
	}
	b, err := x.bl.Baseline(ctx, fmt.Sprintf("%s-%d", x.prefix, i))
	if err != nil {
		return nil, err
	}
	x.all = append(x.all, b)
	q, ok := b.(driver.QueueBaseline)
	if !ok {
		return nil, driver.Errorf(dcsync.NotImplemented, "queuebench", "the store's baseline has no queue operations")
	}
	x.bs[i] = q
	return q, nil
}

// Write implements Raw: WriteRows of writer w's baseline.
func (x *BaselineRaw) Write(ctx context.Context, w int, payloads [][]byte) error {
	q, err := x.of(ctx, w)
	if err != nil {
		return err
	}
	return q.WriteRows(ctx, payloads)
}

// Read implements Raw: ReadRows of reader r's baseline (the rows writer r wrote).
func (x *BaselineRaw) Read(ctx context.Context, r, n int) (int, error) {
	q, err := x.of(ctx, r)
	if err != nil {
		return 0, err
	}
	return q.ReadRows(ctx, n)
}

// Commit implements Raw: CommitOffset of reader r's baseline.
func (x *BaselineRaw) Commit(ctx context.Context, r int, next int64) error {
	q, err := x.of(ctx, r)
	if err != nil {
		return err
	}
	return q.CommitOffset(ctx, next)
}

// Close deletes the rows of every baseline made.
func (x *BaselineRaw) Close(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	var errs []error
	for _, b := range x.all {
		errs = append(errs, b.Close(ctx))
	}
	x.all, x.bs = nil, map[int]driver.QueueBaseline{}
	return errors.Join(errs...)
}
