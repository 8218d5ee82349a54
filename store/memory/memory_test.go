package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sharedStore lets every test of the suite see one store, as processes of an
// application would; Close on it is a no-op so one test cannot close another's.
type sharedStore struct{ *memory.Store }

func (sharedStore) Close() error { return nil }

func TestConformance(t *testing.T) {
	shared := sharedStore{memory.New()}
	storetest.Run(t, storetest.Harness{
		Open:    func(t *testing.T) driver.Store { return shared },
		OpenOwn: func(t *testing.T) driver.Store { return memory.New() },
	})
}
