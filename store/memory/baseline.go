package memory

import (
	"context"
	"sync"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.Baseliner = (*Store)(nil)

// Baseline returns the raw operations of an in-memory store: a map write or read under
// a mutex, the floor of any operation here. Its records are its own (not the store's
// maps), so Close has nothing of the store's to remove.
func (s *Store) Baseline(ctx context.Context, prefix string) (driver.Baseline, error) {
	if err := driver.ValidateID("baseline prefix", prefix); err != nil {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, driver.Errorf(dcsync.Connection, "memory.Baseline", "store is closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, driver.Errorf(dcsync.Connection, "memory.Baseline", "context done: %w", err)
	}
	return &baseline{m: map[string]int64{}, name: prefix}, nil
}

type baseline struct {
	mu   sync.Mutex
	m    map[string]int64
	name string
}

func (b *baseline) Describe() map[string]string {
	return map[string]string{"lock": "map insert-if-absent + delete", "add": "map add", "get": "map read"}
}

func (b *baseline) LockPair(context.Context) error {
	b.mu.Lock()
	if _, ok := b.m[b.name+"/lock"]; ok {
		b.mu.Unlock()
		return driver.Errorf(dcsync.Internal, "memory.Baseline", "baseline lock is held")
	}
	b.m[b.name+"/lock"] = 1
	b.mu.Unlock()
	b.mu.Lock()
	delete(b.m, b.name+"/lock")
	b.mu.Unlock()
	return nil
}

func (b *baseline) Add(_ context.Context, delta int64) error {
	b.mu.Lock()
	b.m[b.name+"/count"] += delta
	b.mu.Unlock()
	return nil
}

func (b *baseline) Get(context.Context) error {
	b.mu.Lock()
	_ = b.m[b.name+"/count"]
	b.mu.Unlock()
	return nil
}

func (b *baseline) Close(context.Context) error { return nil }
