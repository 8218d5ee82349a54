package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dcsync/dcsync/queue/queuetest"
	"github.com/dcsync/dcsync/store/sqlite"
)

// TestQueueConformance runs the queue suite on one file, each test's stores opened on
// it separately (as separate processes would), and child processes opening it too.
func TestQueueConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	queuetest.Run(t, queuetest.Harness{
		Open: func(t *testing.T) queuetest.QueueTestStore {
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		ProcessEnv: func(t *testing.T) []string { return []string{envPath + "=" + path} },
	})
}
