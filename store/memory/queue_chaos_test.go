package memory_test

import (
	"context"
	"github.com/dcsync/dcsync/driver"
	"testing"
	"time"

	"github.com/dcsync/dcsync/internal/chaos"
	"github.com/dcsync/dcsync/store/memory"
)

// TestQueueChaos runs internal/chaos's queue model on the memory store: producers
// and consumers of two groups (goroutines; the store lives in this process), consumers
// that nack, leave and join, and freezes of a consumer's store calls past its lease
// (the in-process pause: its held-back writes land after its successor's). The history
// of at least chaos.QueueCIEvents events (DCSYNC_SOAK: for that long) is checked by
// chaos.CheckQueue.
func TestQueueChaos(t *testing.T) {
	s := memory.New()
	sc := chaos.QueueScenario{
		Open:      func(context.Context) (driver.Store, error) { return sharedStore{s}, nil },
		Producers: 2, Consumers: 3,
		Events: chaos.QueueCIEvents, Duration: 2 * time.Minute,
		Churn: 30, Freeze: true, FaultEvery: 500 * time.Millisecond,
	}
	sc.Soak()
	chaos.RunQueueT(t, sc, chaos.QueueCIEvents)
}
