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
	rows [][]byte // WriteRows' rows
	pos  int      // the next row ReadRows reads
}

func (b *baseline) Describe() map[string]string {
	return map[string]string{"lock": "map insert-if-absent + delete", "add": "map add", "get": "map read",
		"enqueue": "slice append of copies", "receive": "copies of the rows + map write"}
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

func (b *baseline) Close(context.Context) error {
	b.mu.Lock()
	b.rows, b.pos = nil, 0
	b.mu.Unlock()
	return nil
}

var _ driver.QueueBaseline = (*baseline)(nil)

// WriteRows implements driver.QueueBaseline: copies appended to a slice under the mutex.
func (b *baseline) WriteRows(_ context.Context, payloads [][]byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range payloads {
		b.rows = append(b.rows, append([]byte(nil), p...))
	}
	return nil
}

// ReadRows implements driver.QueueBaseline: copies of n rows under the mutex.
func (b *baseline) ReadRows(_ context.Context, n int) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pos+n > len(b.rows) {
		b.pos = 0
	}
	end := min(b.pos+n, len(b.rows))
	out := make([][]byte, 0, end-b.pos)
	for _, r := range b.rows[b.pos:end] {
		out = append(out, append([]byte(nil), r...))
	}
	b.pos = end
	return len(out), nil
}

// CommitOffset implements driver.QueueBaseline: a map write under the mutex.
func (b *baseline) CommitOffset(_ context.Context, next int64) error {
	b.mu.Lock()
	b.m[b.name+"/offset"] = next
	b.mu.Unlock()
	return nil
}
