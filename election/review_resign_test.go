package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/store/memory"
)

// Resign twice: the second is harmless (nil or LockLost, never another code), and the
// leadership's context stays ended.
func TestReviewResignTwice(t *testing.T) {
	s := memory.New()
	m := newManager(t, s)
	ctx := context.Background()
	ld, err := m.Campaign(ctx, "e", "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil && dcsync.CodeOf(err) != dcsync.LockLost {
		t.Fatalf("second Resign = %v (code %v), want nil or LockLost", err, dcsync.CodeOf(err))
	}
	if err := ld.Proclaim(ctx, "b"); dcsync.CodeOf(err) != dcsync.LockLost {
		t.Fatalf("Proclaim after Resign = %v, want LockLost", err)
	}
}

// A new observer, in the process of a leader that resigned, is not handed the resigned
// leader as the current one when the next reading of the store says nobody leads: its
// first observation, if any within a poll interval, is a live leader. (Local Campaign
// and Proclaim reach observers at once; a local Resign does not, so the watcher's
// current leader stays the resigned one until its next read.)
func TestReviewNewObserverAfterLocalResign(t *testing.T) {
	s := memory.New()
	m := newManager(t, s, election.WithPollInterval(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := m.Observe(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := m.Campaign(ctx, "e", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := <-first; got.Token != ld.Token() {
		t.Fatalf("first observation %+v", got)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Leader(ctx, "e"); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("Leader after Resign = %v, want NotFound", err)
	}
	second, err := m.Observe(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-second:
		t.Logf("note: a new observer was handed %+v, a leader that had resigned (Leader says NotFound); allowed by 'the current one (within a poll interval)'", got)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	for range first {
	}
	for range second {
	}
}
