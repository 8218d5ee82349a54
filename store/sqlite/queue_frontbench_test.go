package sqlite_test

import (
	"context"
	"github.com/dcsync/dcsync/driver"
	"path/filepath"
	"testing"

	"github.com/dcsync/dcsync/internal/queuebench"
	"github.com/dcsync/dcsync/store/sqlite"
)

// BenchmarkQueueFrontEnd runs the queue's front-end suite (package queue's Enqueue,
// Consumer.Receive and Ack) on one SQLite file, every Open a new store handle on it,
// next to the raw floor on the same file, the one `dcsync bench` measures (the store's
// driver.QueueBaseline): INSERTs of the same rows into dcsync_queue_entries in one
// IMMEDIATE transaction per batch, SELECTs of a key range, an offset row written per
// batch.
//
//	go test -run '^$' -bench QueueFrontEnd -benchtime 20x -count 3 ./store/sqlite/
func BenchmarkQueueFrontEnd(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "q.db")
	floor, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	raw := queuebench.NewBaselineRaw(floor, "front")
	b.Cleanup(func() { raw.Close(ctx); floor.Close() })
	queuebench.Run(b, queuebench.Config{
		Open: func(b *testing.B) driver.Store {
			s, err := sqlite.Open(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
		Raw: raw,
	})
}
