package aerospike_test

import (
	"context"
	"os"
	"testing"

	"github.com/dcsync/dcsync/queue/queuetest"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestQueueConformance runs the queue conformance suite (the QueueStore contract and
// package queue on top of it), multi-process cases included, against the real server.
func TestQueueConformance(t *testing.T) {
	addr := realServer(t)
	h := harness(addr, namespace)
	queuetest.Run(t, queuetest.Harness{
		Open: func(t *testing.T) queuetest.QueueTestStore {
			s, err := aerospike.OpenURL(context.Background(), storeURL(addr, namespace))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		ProcessEnv: h.ProcessEnv,
		Holes:      true,
	})
}

// queueChildMain runs a queuetest child process (TestMain calls it first).
func queueChildMain() {
	queuetest.ChildMain(func(ctx context.Context) (queuetest.QueueTestStore, error) {
		return aerospike.OpenURL(ctx, storeURL(os.Getenv(envChildAddr), os.Getenv(envChildNS)))
	})
}
