package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue/queuetest"
	"github.com/dcsync/dcsync/store/sqlite"
	"github.com/dcsync/dcsync/store/storetest"
)

const envPath = "DCSYNC_TEST_SQLITE_PATH"

func TestMain(m *testing.M) {
	storetest.ChildMain(func(ctx context.Context) (driver.Store, error) {
		return sqlite.Open(ctx, os.Getenv(envPath))
	})
	queuetest.ChildMain(func(ctx context.Context) (queuetest.QueueTestStore, error) {
		return sqlite.Open(ctx, os.Getenv(envPath))
	})
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dcsync.db")
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) driver.Store {
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		ProcessEnv: func(t *testing.T) []string { return []string{envPath + "=" + path} },
	})
}
