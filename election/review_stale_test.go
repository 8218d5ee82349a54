package election_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/memory"
)

// A stale leader (its lease over in the store's clock, before its own KeepAlive
// noticed) Proclaims while the next leader, on another store value (another process),
// has taken the lock and its publish is in flight: whichever write lands first, the
// next leader's Campaign succeeds, the register ends at its token and value, Leader
// reports it, and a later Proclaim of the stale leader is LockLost and writes nothing.
func TestReviewStaleProclaimBeforeNextPublish(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	base := memory.New(memory.WithClock(clock))
	a := newManager(t, base)
	ctx := context.Background()
	old, err := a.Campaign(ctx, "e", "old")
	if err != nil {
		t.Fatal(err)
	}
	// The store's clock passes the lease: the lock is free in the store, while the old
	// leader's own deadline (real time) is a minute away.
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	g := &gated{Store: base}
	b := newManager(t, g)
	g.arm(false)
	type res struct {
		token uint64
		err   error
	}
	done := make(chan res, 1)
	var ldB interface {
		Resign(context.Context) error
	}
	var ldMu sync.Mutex
	go func() {
		ld, err := b.Campaign(ctx, "e", "new")
		if err != nil {
			done <- res{0, err}
			return
		}
		ldMu.Lock()
		ldB = ld
		ldMu.Unlock()
		done <- res{ld.Token(), nil}
	}()
	<-g.entered
	// The new leader holds the lock, its publish in flight; the stale leader proclaims.
	staleErr := old.Proclaim(ctx, "stale")
	close(g.release)
	r := <-done
	if r.err != nil {
		t.Fatalf("next leader's Campaign after a stale Proclaim (%v) = %v", staleErr, r.err)
	}
	got, err := b.Leader(ctx, "e")
	if err != nil || got.Token != r.token || got.Value != "new" {
		t.Fatalf("Leader = %+v, %v; want token %d value new", got, err, r.token)
	}
	regs, _ := base.ReadRegisters(ctx, []dcsync.Key{old.Key()})
	if err := old.Proclaim(ctx, "stale2"); dcsync.CodeOf(err) != dcsync.LockLost {
		t.Fatalf("stale Proclaim after the next leader published = %v, want LockLost", err)
	}
	regs2, _ := base.ReadRegisters(ctx, []dcsync.Key{old.Key()})
	if regs2[0].Register.Gen != regs[0].Register.Gen {
		t.Fatalf("a refused stale Proclaim changed the register: gen %d -> %d", regs[0].Register.Gen, regs2[0].Register.Gen)
	}
	t.Logf("note: the stale leader's Proclaim while the next leader's publish was in flight returned %v", staleErr)
	ldMu.Lock()
	defer ldMu.Unlock()
	if err := ldB.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	_ = old.Resign(ctx)
}
