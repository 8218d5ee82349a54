package drivertest_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/sqlite"
)

// A back end's tests call Run once, from one test function; SQLite stands in for the
// new back end here. The store is shared between processes, so the harness says how a
// child process opens it (ProcessEnv) and TestMain hands child processes to ChildMain.
// (An example is compiled, not run: in a store's _test.go file, testMain is TestMain
// and testConformance is TestConformance.)
func ExampleRun() {
	const envPath = "MYSTORE_TEST_PATH"

	testMain := func(m *testing.M) {
		// In a child process of the multi-process cases: run its part and exit.
		drivertest.ChildMain(func(ctx context.Context) (driver.Store, error) {
			return sqlite.Open(ctx, os.Getenv(envPath))
		})
		os.Exit(m.Run())
	}

	testConformance := func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "test.db")
		drivertest.Run(t, drivertest.Harness{
			// Every store Open returns sees the same data, as processes would.
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

	_, _ = testMain, testConformance
}
