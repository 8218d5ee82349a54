package sqlite_test

import (
	"context"
	"github.com/dcsync/dcsync/driver"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcsync/dcsync/internal/chaos"
	"github.com/dcsync/dcsync/store/sqlite"
)

// init runs a queue chaos worker when this test binary was started as one (before
// TestMain: the worker needs nothing else of the package).
func init() {
	chaos.QueueChildMain(func(ctx context.Context, path string) (driver.Store, error) { return sqlite.Open(ctx, path) })
}

// TestQueueChaos runs internal/chaos's queue model on one SQLite file: producers and
// consumers of two groups as goroutines and as processes; consumer processes paused
// (SIGSTOP) past their lease and processes killed (SIGKILL) and restarted, goroutine
// consumers frozen past their lease, consumers that nack, leave and join. The history
// of at least chaos.QueueCIEvents events (DCSYNC_SOAK: for that long) is checked by
// chaos.CheckQueue.
func TestQueueChaos(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue-chaos.db")
	sc := chaos.QueueScenario{
		Open:      func(ctx context.Context) (driver.Store, error) { return sqlite.Open(ctx, path) },
		StoreURL:  path,
		Producers: 2, Consumers: 2, ProcessProducers: 1, ProcessConsumers: 1,
		Events: chaos.QueueCIEvents, Duration: 4 * time.Minute,
		Batch: 64, Partitions: 4,
		Churn: 30, Pause: true, Kill: true, Freeze: true,
	}
	sc.Soak()
	chaos.RunQueueT(t, sc, chaos.QueueCIEvents)
}
