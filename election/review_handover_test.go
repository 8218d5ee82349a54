package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/store/memory"
)

// At level XDC the farm is not part of the election: candidates of one process through
// Managers of different farms on one store value are candidates of one election, and
// Resign hands leadership to the next of them at once (backoff an hour: only the
// in-process hand-over can make this end). The pauses only make m2 likely to queue
// first; the order is not asserted (no timing assertion).
func TestReviewXDCHandOverAcrossFarms(t *testing.T) {
	s := memory.New()
	ctx := context.Background()
	mk := func(farm string) *election.Manager {
		m, err := election.New(s, "app", farm, election.WithTTL(time.Minute), election.WithLevel(dcsync.XDC),
			election.WithBackoff(time.Hour, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m1, m2, m3 := mk("dc1"), mk("dc2"), mk("dc3")
	first, err := m1.Campaign(ctx, "e", "one")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		ld  *election.Leadership
		err error
	}
	got2, got3 := make(chan res, 1), make(chan res, 1)
	go func() { ld, err := m2.Campaign(ctx, "e", "two"); got2 <- res{ld, err} }()
	time.Sleep(100 * time.Millisecond)
	go func() { ld, err := m3.Campaign(ctx, "e", "three"); got3 <- res{ld, err} }()
	time.Sleep(100 * time.Millisecond)
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		var r res
		select {
		case r = <-got2:
		case r = <-got3:
		case <-time.After(30 * time.Second):
			t.Fatalf("hand-over %d: no candidate of another farm took over within 30s after Resign (backoff is an hour)", i+1)
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
