package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sharedStore lets every test of the suite see one store, as the goroutines of an
// application would; Close on it is a no-op so one test cannot close another's.
type sharedStore struct{ *memory.Store }

func (sharedStore) Close() error { return nil }

// TestConformance runs the conformance suite on one shared store; the store lives in one
// process, so there are no process cases.
func TestConformance(t *testing.T) {
	shared := sharedStore{memory.New()}
	drivertest.Run(t, drivertest.Harness{
		Open:    func(t *testing.T) driver.Store { return shared },
		OpenOwn: func(t *testing.T) driver.Store { return memory.New() },
	})
}
