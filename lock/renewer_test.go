package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// These tests pin the renewer (renewer.go) on the fake clock: one store call per
// renewal interval for all the KeepAlives of a Manager, each lease's outcome its own,
// and every deadline kept while a round hangs.

// batcher wraps a store with driver.LockBatcher: RefreshLocks records each call (when,
// on the fake clock, and how many leases), lets hook block it, fails the leases lost
// names with LockLost, and refreshes the others with the inner store's RefreshLock.
// RefreshLock calls made by anyone else are counted in single.
type batcher struct {
	driver.Store
	clk    *fakeClock
	single atomic.Int64

	mu    sync.Mutex
	calls []batchCall
	lost  map[string]bool // lock names the store answers LockLost for
	hook  func(ctx context.Context)
	inOut bool // a RefreshLocks call is in hook
}

type batchCall struct {
	at   time.Duration // fake monotonic clock
	keys []string      // the lock names renewed
}

var _ driver.LockBatcher = (*batcher)(nil)

func (b *batcher) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	b.single.Add(1)
	return b.Store.RefreshLock(ctx, k, owner, ttl)
}

func (b *batcher) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	b.mu.Lock()
	c := batchCall{at: b.clk.now().mono}
	for _, r := range reqs {
		c.keys = append(c.keys, r.Key.Name)
	}
	b.calls = append(b.calls, c)
	hook := b.hook
	b.inOut = hook != nil
	b.mu.Unlock()
	if hook != nil {
		hook(ctx)
		b.mu.Lock()
		b.inOut = false
		b.mu.Unlock()
	}
	out := make([]driver.LockResult, len(reqs))
	for i, r := range reqs {
		b.mu.Lock()
		lost := b.lost[r.Key.Name]
		b.mu.Unlock()
		if lost {
			out[i].Err = driver.Errorf(dcsync.LockLost, "test", "%s: injected loss", r.Key)
			continue
		}
		out[i].State, out[i].Err = b.Store.RefreshLock(ctx, r.Key, r.Owner, r.TTL)
		out[i].State.Token = 0 // allowed in a batch result
	}
	return out, nil
}

func (b *batcher) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return driver.InspectLocks(ctx, b.Store, keys)
}

func (b *batcher) takeCalls() []batchCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls
	b.calls = nil
	return c
}

func (b *batcher) blocked() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inOut
}

// newBatchFixture is a fixture whose Manager's store is a batcher over the gate.
func newBatchFixture(t *testing.T) (*fixture, *batcher) {
	t.Helper()
	f := newFixture(t)
	b := &batcher{Store: f.gate, clk: f.clk, lost: map[string]bool{}}
	m, err := New(b, "billing", "dc1")
	if err != nil {
		t.Fatal(err)
	}
	m.clk = f.clk
	f.m = m
	return f, b
}

func (f *fixture) acquireNamed(t *testing.T, name string, ttl time.Duration) *Lock {
	t.Helper()
	l, err := f.m.TryAcquire(context.Background(), name, TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// N leases acquired at different instants over more than one renewal interval settle,
// within two intervals, into one store call per interval renewing all of them, and no
// lease is renewed later than a third into it.
func TestKeepAliveBatchesOneCallPerInterval(t *testing.T) {
	const n = 30
	ctx := context.Background()
	f, b := newBatchFixture(t)
	f.clk.after = func() { f.settle(t) }
	var locks []*Lock
	var kctxs []context.Context
	var every time.Duration // the renewal interval: a third of the lease
	for i := range n {
		l := f.acquireNamed(t, fmt.Sprintf("job-%02d", i), 10*time.Second)
		every = l.lease / 3
		locks = append(locks, l)
		kctxs = append(kctxs, l.KeepAlive(ctx))
		f.clk.advance(every / 20) // 30 leases acquired over 1.5 intervals
	}
	f.clk.advance(3 * every) // settling
	b.takeCalls()
	const intervals = 6
	from := f.clk.now().mono
	// The leases' send times just before the measurement: each is renewed a third into
	// its lease at the latest, i.e. never after its send time plus every.
	f.clk.advance(intervals * every)
	calls := b.takeCalls()
	if len(calls) != intervals {
		t.Fatalf("%d store calls in %d renewal intervals, want one per interval: %+v", len(calls), intervals, calls[:min(len(calls), 4)])
	}
	for i, c := range calls {
		if len(c.keys) != n {
			t.Fatalf("call %d at %v renewed %d leases, want all %d", i, c.at-from, len(c.keys), n)
		}
		if i > 0 && c.at-calls[i-1].at != every {
			t.Fatalf("calls %v apart, want a renewal interval (%v)", c.at-calls[i-1].at, every)
		}
	}
	if s := b.single.Load(); s != 0 {
		t.Fatalf("%d RefreshLock calls besides the batches", s)
	}
	for i, l := range locks {
		wantLive(t, kctxs[i], l.Key().Name)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A lease the store answers LockLost for, in a round with others, ends its own
// KeepAlive only; the others are renewed, in the next rounds too.
func TestKeepAliveBatchLosesOnlyTheLostLease(t *testing.T) {
	const n = 5
	ctx := context.Background()
	f, b := newBatchFixture(t)
	f.clk.after = func() { f.settle(t) }
	var locks []*Lock
	var kctxs []context.Context
	for i := range n {
		l := f.acquireNamed(t, fmt.Sprintf("job-%d", i), 10*time.Second)
		locks = append(locks, l)
		kctxs = append(kctxs, l.KeepAlive(ctx))
	}
	every := locks[0].lease / 3
	b.mu.Lock()
	b.lost["job-2"] = true
	b.mu.Unlock()
	f.clk.advance(every)
	if calls := b.takeCalls(); len(calls) != 1 || len(calls[0].keys) != n {
		t.Fatalf("calls %+v, want one of %d leases", calls, n)
	}
	wantLost(t, kctxs[2], "the lease the store said lost")
	for i := range n {
		if i != 2 {
			wantLive(t, kctxs[i], fmt.Sprintf("lease %d in the same round", i))
		}
	}
	f.clk.advance(3 * every) // three more rounds, past the first lease's deadline
	calls := b.takeCalls()
	if len(calls) != 3 {
		t.Fatalf("%d calls in 3 intervals after the loss, want 3", len(calls))
	}
	for _, c := range calls {
		if len(c.keys) != n-1 {
			t.Fatalf("a round after the loss renewed %v, want the %d others", c.keys, n-1)
		}
	}
	for i, l := range locks {
		if i == 2 {
			wantLost(t, kctxs[i], "the lost lease later")
			if err := l.Release(ctx); !errors.Is(err, dcsync.ErrLockLost) {
				t.Fatalf("Release of the lost lease: %v, want LockLost", err)
			}
			continue
		}
		wantLive(t, kctxs[i], fmt.Sprintf("lease %d, three rounds later", i))
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A round whose store call hangs (ignoring its context) does not keep any lease alive:
// each KeepAlive context ends exactly at its own deadline, the call still out.
func TestKeepAliveHangingBatchEndsEveryContextAtItsDeadline(t *testing.T) {
	const n = 4
	ctx := context.Background()
	f, b := newBatchFixture(t)
	unblock := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(unblock) }) }
	defer release()
	b.mu.Lock()
	b.hook = func(context.Context) { <-unblock }
	b.mu.Unlock()
	var locks []*Lock
	var kctxs []context.Context
	for i := range n {
		l := f.acquireNamed(t, fmt.Sprintf("job-%d", i), 10*time.Second)
		locks = append(locks, l)
		kctxs = append(kctxs, l.KeepAlive(ctx))
		f.clk.advance(500 * time.Millisecond) // deadlines 500 ms apart
	}
	lease := locks[0].lease
	f.clk.advance(lease/3 - n*500*time.Millisecond) // the first lease is due
	for end := time.Now().Add(10 * time.Second); !b.blocked(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no round was sent a third into the first lease")
		}
	}
	if calls := b.takeCalls(); len(calls) != 1 || len(calls[0].keys) != n {
		t.Fatalf("calls %+v, want one round of all %d leases (due within half an interval)", calls, n)
	}
	for i := range n {
		deadline := time.Duration(i)*500*time.Millisecond + lease
		now := f.clk.now().mono
		f.clk.advance(deadline - time.Nanosecond - now)
		for j := i; j < n; j++ {
			wantLive(t, kctxs[j], fmt.Sprintf("lease %d, 1ns before lease %d's deadline", j, i))
		}
		f.clk.advance(time.Nanosecond)
		wantLost(t, kctxs[i], fmt.Sprintf("lease %d at its deadline, the round still out", i))
		if !b.blocked() {
			t.Fatal("the round came back: the test shows nothing")
		}
	}
	release()
	f.settle(t)
	for _, l := range locks {
		if err := l.Release(ctx); !errors.Is(err, dcsync.ErrLockLost) {
			t.Fatalf("Release after the loss: %v, want LockLost", err)
		}
	}
}

// Release waits for the round renewing its lock; the round's store call is cancelled
// once every KeepAlive in it has stopped, not before: releasing one lock of a hanging
// round gives up when its ctx ends (Connection), releasing the last one cancels the call.
func TestReleaseCancelsTheRoundOnlyWithItsLastKeepAlive(t *testing.T) {
	ctx := context.Background()
	f, b := newBatchFixture(t)
	b.mu.Lock()
	b.hook = func(ctx context.Context) { <-ctx.Done() } // hangs until cancelled
	b.mu.Unlock()
	a, c := f.acquireNamed(t, "job-a", 10*time.Second), f.acquireNamed(t, "job-c", 10*time.Second)
	a.KeepAlive(ctx)
	c.KeepAlive(ctx)
	f.clk.advance(a.lease / 3)
	for end := time.Now().Add(10 * time.Second); !b.blocked(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no round was sent")
		}
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := a.Release(short); dcsync.CodeOf(err) != dcsync.Connection || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release of one lock of a hanging round: %v, want Connection matching the ctx's deadline", err)
	}
	if !b.blocked() {
		t.Fatal("releasing one lock of the round cancelled the round of the other")
	}
	bounded, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	b.mu.Lock()
	b.hook = nil
	b.mu.Unlock()
	if err := c.Release(bounded); err != nil {
		t.Fatalf("Release of the round's last lock: %v, want the round cancelled and the lock released", err)
	}
	f.settle(t)
}
