package aerospike_test

import (
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestReviewPreparedCountDownConcurrent (review, issue 15; real server): goroutines of
// one Store count down DC latches with the same and different deltas at once, the
// latch deleted and re-created (a new incarnation) by another Store between rounds:
// every count-down lands exactly once on the latch of its round (run with -race: the
// prepared filters are shared).
func TestReviewPreparedCountDownConcurrent(t *testing.T) {
	s := newStore(t, realClient(t), aerospike.Config{})
	other := newStore(t, realClient(t), aerospike.Config{})
	ctx := ctxT(t)
	k := dcsync.Key{Level: dcsync.DC, Client: "rev", Farm: "dc1", Name: unique("prep")}
	const workers, each = 6, 10
	for round := range 3 {
		if round > 0 {
			must(t, other.DeleteLatch(ctx, k), "delete")
		}
		must(t, other.CreateLatch(ctx, k, 1000, time.Minute), "create")
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					if _, err := s.AddLatch(ctx, k, -int64(1+w%2)); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: AddLatch: %v", round, err)
		}
		got, err := s.ReadLatches(ctx, []dcsync.Key{k})
		must(t, err, "read")
		want := int64(1000 - each*(workers/2)*1 - each*(workers/2)*2)
		if !got[0].Found || got[0].Count != want {
			t.Fatalf("round %d: the latch reads %+v, want count %d", round, got[0], want)
		}
	}
}
