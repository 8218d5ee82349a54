package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/sqlite"
)

const envPath = "DCSYNC_TEST_SQLITE_PATH"

func TestMain(m *testing.M) {
	drivertest.ChildMain(func(ctx context.Context) (driver.Store, error) {
		return sqlite.Open(ctx, os.Getenv(envPath))
	})
	goleak.VerifyTestMain(m)
}

// TestConformance runs the conformance suite on one file, each test's stores opened on
// it separately (as separate processes would), and child processes opening it too.
func TestConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dcsync.db")
	drivertest.Run(t, drivertest.Harness{
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
