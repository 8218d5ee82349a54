package memory_test

import (
	"testing"

	"github.com/dcsync/dcsync/queue/queuetest"
	"github.com/dcsync/dcsync/store/memory"
)

// TestQueueConformance runs the queue suite on one shared store, as the goroutines of an
// application share it; the store lives in one process, so there are no process cases.
func TestQueueConformance(t *testing.T) {
	shared := sharedStore{memory.New()}
	queuetest.Run(t, queuetest.Harness{
		Open: func(t *testing.T) queuetest.QueueTestStore { return shared },
	})
}
