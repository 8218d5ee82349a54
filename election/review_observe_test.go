package election_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/store/memory"
)

// Observers come and go concurrently (the watcher stops and starts again many times)
// while a leader proclaims: every observer that stays sees the leader, every channel
// closes with its ctx, and no goroutine is left (goleak in TestMain).
func TestReviewObserveChurn(t *testing.T) {
	s := memory.New()
	m := newManager(t, s, election.WithPollInterval(5*time.Millisecond))
	ctx := context.Background()
	ld, err := m.Campaign(ctx, "e", "v")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				octx, cancel := context.WithCancel(ctx)
				ch, err := m.Observe(octx, "e")
				if err != nil {
					cancel()
					errs <- err.Error()
					return
				}
				if i%2 == 0 {
					select {
					case l := <-ch:
						if l.Token != ld.Token() {
							errs <- "wrong token"
						}
					case <-time.After(time.Minute):
						errs <- "an observer saw nothing within a minute"
					}
				}
				cancel()
				for range ch {
				}
			}
		}()
	}
	for i := 0; i < 50; i++ {
		if err := ld.Proclaim(ctx, "v"+itoa(i%3)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
