package aerospike_test

import (
	"context"
	"sync"
	"testing"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/queuebench"
	"github.com/dcsync/dcsync/store/aerospike"
)

// BenchmarkQueueFrontEnd runs the queue's front-end suite (package queue's Enqueue,
// Consumer.Receive and Ack) on the real server, every Open a new client and store on
// it, next to the raw floor in the same namespace, the one `dcsync bench` measures (the
// store's driver.QueueBaseline): batch writes of records like the queue's entries, in
// its entry set, batch gets of n of their keys, a put of an offset record per batch. The queues a case
// creates are trimmed, and the raw records deleted, when it ends (the test namespace
// is in memory).
//
//	DCSYNC_AEROSPIKE=host:port go test -run '^$' -bench QueueFrontEnd -benchtime 20x -count 3 ./store/aerospike/
func BenchmarkQueueFrontEnd(b *testing.B) {
	ctx := context.Background()
	floor := newStore(b, realClient(b), aerospike.Config{})
	raw := queuebench.NewBaselineRaw(floor, unique("front"))
	b.Cleanup(func() { raw.Close(ctx) })
	queuebench.Run(b, queuebench.Config{
		Open: func(b *testing.B) driver.Store {
			// Every queue case comes before its raw case: the raw records of the
			// cases before are no longer read.
			raw.Close(ctx)
			s := &trimmed{Store: newStore(b, realClient(b), aerospike.Config{})}
			b.Cleanup(s.trim)
			return s
		},
		Raw: raw,
	})
}

// trimmed is a store that deletes the queues created through it when the case ends.
type trimmed struct {
	*aerospike.Store
	mu     sync.Mutex
	queues []string
}

func (s *trimmed) CreateQueue(ctx context.Context, spec driver.QueueSpec) error {
	err := s.Store.CreateQueue(ctx, spec)
	if err == nil {
		s.mu.Lock()
		s.queues = append(s.queues, spec.Name)
		s.mu.Unlock()
	}
	return err
}

func (s *trimmed) trim() {
	ctx := context.Background()
	for _, name := range s.queues {
		// Deleted, not trimmed: a trim stops at the groups' offsets, and the case may
		// end with events not acked.
		_ = s.DeleteQueue(ctx, name)
	}
}
