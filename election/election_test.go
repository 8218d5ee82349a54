package election_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newManager(t *testing.T, s driver.LockStore, opts ...election.Option) *election.Manager {
	t.Helper()
	m, err := election.New(s, "app", "dc1", append([]election.Option{election.WithTTL(time.Minute), election.WithPollInterval(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewRefusesAStoreWithoutRegisters(t *testing.T) {
	s := struct{ driver.LockStore }{memory.New()}
	if _, err := election.New(s, "app", "dc1"); dcsync.CodeOf(err) != dcsync.NotImplemented {
		t.Fatalf("New on a store without registers = %v, want NotImplemented", err)
	}
	for _, opts := range [][]election.Option{
		{election.WithPollInterval(0)},
		{election.WithYield(-time.Second)},
		{election.WithTTL(time.Millisecond)},
		{election.WithLevel(dcsync.Level(9))},
	} {
		if _, err := election.New(memory.New(), "app", "dc1", opts...); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Fatalf("New with a bad option = %v, want InvalidArgument", err)
		}
	}
	if _, err := election.New(nil, "app", "dc1"); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("New(nil) = %v, want InvalidArgument", err)
	}
}

// The leadership outlives Campaign's ctx; a Campaign whose ctx ends while it waits
// returns LockUnavailable matching ctx's error.
func TestCampaignContext(t *testing.T) {
	s := memory.New()
	m := newManager(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	ld, err := m.Campaign(ctx, "e", "a")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if ld.Context().Err() != nil {
		t.Fatal("leadership ended with Campaign's ctx")
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer wcancel()
	_, err = m.Campaign(wctx, "e", "b")
	if dcsync.CodeOf(err) != dcsync.LockUnavailable || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign that waited out its ctx = %v, want LockUnavailable matching DeadlineExceeded", err)
	}
	if err := ld.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ld.Context().Err() == nil {
		t.Fatal("Resign did not end the leadership's context")
	}
}

// Leader reports a lock holder that has not published as Pending.
func TestLeaderPending(t *testing.T) {
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
	// A candidate that took the lock and died before publishing.
	lm, err := lock.New(s, "app", "dc1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := lm.TryAcquire(ctx, "election:1:e", lock.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Leader(ctx, "e")
	if err != nil || !got.Pending || got.Token != l.Token() || got.Value != "" {
		t.Fatalf("Leader while the holder has not published = %+v, %v; want Pending token %d", got, err, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// flaky is a memory store whose SwapRegister fails with Connection after it applied the
// write, as a write whose reply was lost would.
type flaky struct {
	*memory.Store
	mu    sync.Mutex
	fails int // SwapRegister calls still to fail after applying
	swaps int // SwapRegister calls that wrote
}

func (f *flaky) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	r, err := f.Store.SwapRegister(ctx, k, gen, value)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.swaps++
		if f.fails > 0 {
			f.fails--
			return driver.Register{}, driver.Errorf(dcsync.Connection, "flaky", "reply lost")
		}
	}
	return r, err
}

// A publish whose reply was lost is found landed by the read that follows, and is not
// written twice.
func TestPublishAfterALostReply(t *testing.T) {
	f := &flaky{Store: memory.New()}
	m := newManager(t, f)
	ctx := context.Background()
	f.fails = 1
	ld, err := m.Campaign(ctx, "e", "a")
	if err != nil {
		t.Fatal(err)
	}
	f.fails = 1
	if err := ld.Proclaim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if f.swaps != 2 {
		t.Fatalf("%d register writes for a Campaign and a Proclaim whose replies were lost, want 2", f.swaps)
	}
	got, err := m.Leader(ctx, "e")
	if err != nil || got.Value != "b" || got.Token != ld.Token() {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
	if err := ld.Proclaim(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A new observer gets the current leader, and the channel closes with its ctx.
func TestObserveCurrentAndClose(t *testing.T) {
	s := memory.New()
	m := newManager(t, s)
	ctx := context.Background()
	ld, err := m.Campaign(ctx, "e", "a")
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	ch, err := m.Observe(octx, "e")
	if err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.Token != ld.Token() || got.Value != "a" || got.Name != "e" {
		t.Fatalf("first observation %+v", got)
	}
	cancel()
	for range ch {
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
