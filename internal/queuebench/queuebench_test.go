package queuebench_test

import (
	"context"
	"github.com/dcsync/dcsync/driver"
	"sync"
	"testing"

	"github.com/dcsync/dcsync/internal/queuebench"
	"github.com/dcsync/dcsync/store/memory"
)

// mapRaw is the memory store's floor: rows in a map under a mutex.
type mapRaw struct {
	mu   sync.Mutex
	rows map[int][][]byte
	pos  map[int]int
}

func (m *mapRaw) Write(_ context.Context, w int, ps [][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		m.rows[w] = append(m.rows[w], append([]byte(nil), p...))
	}
	return nil
}

func (m *mapRaw) Read(_ context.Context, r, n int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rows := m.rows[r]
	got := 0
	for ; got < n && len(rows) > 0; got++ {
		_ = append([]byte(nil), rows[m.pos[r]%len(rows)]...)
		m.pos[r]++
	}
	return got, nil
}

func (m *mapRaw) Commit(_ context.Context, r int, next int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pos[-1-r] = int(next)
	return nil
}

// BenchmarkMemory runs the suite on the memory store (and checks that it runs).
func BenchmarkMemory(b *testing.B) {
	s := memory.New()
	b.Cleanup(func() { s.Close() })
	queuebench.Run(b, queuebench.Config{
		Open: func(*testing.B) driver.Store { return s },
		Raw:  &mapRaw{rows: map[int][][]byte{}, pos: map[int]int{}},
	})
}
