package lock

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a clock whose monotonic and wall readings the test moves. Timers fire
// synchronously inside advance, in order of their due time.
type fakeClock struct {
	mu     sync.Mutex
	mono   time.Duration
	wall   time.Time
	timers []*fakeTimer
	// after, when set, runs after each timer advance fires (outside the clock's lock):
	// the batch tests settle the renewer there, so that every round comes back before
	// the clock moves on.
	after func()
}

type fakeTimer struct {
	c  *fakeClock
	at time.Duration
	f  func()
}

func newFakeClock() *fakeClock { return &fakeClock{wall: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) now() stamp {
	c.mu.Lock()
	defer c.mu.Unlock()
	return stamp{mono: c.mono, wall: c.wall, at: c.wall}
}

// Wall is the store's clock.
func (c *fakeClock) Wall() time.Time { return c.now().wall }

func (c *fakeClock) afterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.mono + max(d, 0), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (c *fakeClock) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx) // the watchdog ends the lease on this clock
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// advance moves both clocks by d, firing the timers that fall due on the way, also
// those set by the timers it fires.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	target := c.mono + d
	for {
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at < c.timers[j].at })
		if len(c.timers) == 0 || c.timers[0].at > target {
			break
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		if t.at > c.mono {
			c.wall = c.wall.Add(t.at - c.mono)
			c.mono = t.at
		}
		after := c.after
		c.mu.Unlock()
		t.f()
		if after != nil {
			after()
		}
		c.mu.Lock()
	}
	c.wall = c.wall.Add(target - c.mono)
	c.mono = target
	c.mu.Unlock()
}

// stepWall steps the wall clock alone, as an NTP step or `date -s` does.
func (c *fakeClock) stepWall(d time.Duration) {
	c.mu.Lock()
	c.wall = c.wall.Add(d)
	c.mu.Unlock()
}

// settle waits until no renewal round of m is out: each round's outcome is applied and
// the renewer's timer armed for what comes next (KeepAlive arms it before it returns).
func settle(t *testing.T, m *Manager) {
	t.Helper()
	if m.rn == nil {
		return
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		if m.rn.out.Load() == 0 {
			return
		}
	}
	t.Fatal("a renewal round was still out after 10s")
}

func (f *fixture) settle(t *testing.T) {
	t.Helper()
	settle(t, f.m)
}

// gate wraps a store and controls RefreshLock: each call is announced on calls, then
// hook (if set) decides: it may block, fail, or return ok=false to pass the call on.
type gate struct {
	driver.Store
	calls chan struct{}
	mu    sync.Mutex
	hook  func(ctx context.Context) (driver.LockState, error, bool)
}

func newGate(s driver.Store) *gate { return &gate{Store: s, calls: make(chan struct{}, 1000)} }

func (g *gate) set(hook func(ctx context.Context) (driver.LockState, error, bool)) {
	g.mu.Lock()
	g.hook = hook
	g.mu.Unlock()
}

func (g *gate) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	g.calls <- struct{}{}
	g.mu.Lock()
	hook := g.hook
	g.mu.Unlock()
	if hook != nil {
		if st, err, done := hook(ctx); done {
			return st, err
		}
	}
	return g.Store.RefreshLock(ctx, k, owner, ttl)
}

// waitCall waits for the next RefreshLock call.
func (g *gate) waitCall(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.calls:
	case <-time.After(10 * time.Second):
		t.Fatalf("no renewal was sent: %s", what)
	}
}

func failWith(err error) func(context.Context) (driver.LockState, error, bool) {
	return func(context.Context) (driver.LockState, error, bool) { return driver.LockState{}, err, true }
}

var errOutage = driver.Errorf(dcsync.Connection, "test", "injected outage")

type fixture struct {
	clk   *fakeClock
	store *memory.Store
	gate  *gate
	m     *Manager
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	clk := newFakeClock()
	st := memory.New(memory.WithClock(clk.Wall))
	g := newGate(st)
	m, err := New(g, "billing", "dc1", opts...)
	if err != nil {
		t.Fatal(err)
	}
	m.clk = clk
	return &fixture{clk: clk, store: st, gate: g, m: m}
}

func (f *fixture) acquire(t *testing.T, ttl time.Duration) *Lock {
	t.Helper()
	l, err := f.m.TryAcquire(context.Background(), "job", TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func wantLost(t *testing.T, kctx context.Context, what string) {
	t.Helper()
	if kctx.Err() == nil {
		t.Fatalf("%s: keep-alive context still live", what)
	}
	if cause := context.Cause(kctx); !errors.Is(cause, dcsync.ErrLockLost) {
		t.Fatalf("%s: cause %v, want LockLost", what, cause)
	}
}

func wantLive(t *testing.T, kctx context.Context, what string) {
	t.Helper()
	if kctx.Err() != nil {
		t.Fatalf("%s: keep-alive context ended: %v", what, context.Cause(kctx))
	}
}

// Defect: the first renewal came TTL/3 after KeepAlive was called, so a KeepAlive
// started after 2/3 of the TTL let the lease end first. Renewals are scheduled against
// the lease's deadline: started late, KeepAlive renews at once.
func TestKeepAliveStartedLateRenewsAtOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.acquire(t, 3*time.Second)
	f.clk.advance(2500 * time.Millisecond) // past 2/3 of the lease, before its end
	kctx := l.KeepAlive(ctx)
	f.clk.advance(0) // the renewer's timer is due now
	f.gate.waitCall(t, "KeepAlive started at 2.5s of a 3s lease must renew at once")
	f.settle(t) // renewed; the renewer waits for the next renewal
	f.clk.advance(time.Second)
	wantLive(t, kctx, "at 3.5s")
	other, _ := New(f.store, "billing", "dc1")
	if _, err := other.TryAcquire(ctx, "job"); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("another acquirer at 3.5s: %v, want LockUnavailable", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The renewal schedule follows the deadline: the first renewal is due a third of the
// lease after the acquisition was sent, not after KeepAlive was called.
func TestKeepAliveRenewsAThirdIntoTheLease(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.acquire(t, 3*time.Second)
	f.clk.advance(500 * time.Millisecond)
	kctx := l.KeepAlive(ctx)
	f.settle(t)
	f.clk.advance(l.lease/3 - 500*time.Millisecond - time.Millisecond)
	select {
	case <-f.gate.calls:
		t.Fatal("renewed before a third of the lease had passed")
	default:
	}
	f.clk.advance(time.Millisecond)
	f.gate.waitCall(t, "a third into the lease")
	wantLive(t, kctx, "after the renewal")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Defect: loss was noticed only when the renewal timer fired and the Refresh returned;
// a Refresh blocked in the store kept the keep-alive context live past the lease. An
// independent timer ends it at the deadline.
func TestKeepAliveLossDoesNotWaitForBlockedRefresh(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	unblock := make(chan struct{})
	f.gate.set(func(context.Context) (driver.LockState, error, bool) {
		<-unblock // ignores its context, as SQLite's busy wait did
		return driver.LockState{}, nil, false
	})
	l := f.acquire(t, 3*time.Second)
	kctx := l.KeepAlive(ctx)
	f.settle(t)
	f.clk.advance(l.lease / 3)
	f.gate.waitCall(t, "a third into the lease")
	f.clk.advance(l.lease - l.lease/3 - time.Millisecond)
	wantLive(t, kctx, "1ms before the deadline")
	f.clk.advance(time.Millisecond)
	wantLost(t, kctx, "at the deadline, renewal still blocked")
	close(unblock)
	if err := l.Release(ctx); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Release after loss: %v, want LockLost", err)
	}
}

// Defect: loss fired exactly at sent+TTL while the store may end the lease earlier.
// It fires at sent + TTL*(1-drift) - margin, while the stored lease still runs.
func TestLeaseEndsBeforeTheStoredLease(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.gate.set(failWith(errOutage))
	l := f.acquire(t, 10*time.Second)
	if want := 10*time.Second - 100*time.Millisecond - DefaultMargin; l.lease != want {
		t.Fatalf("lease counted locally %v, want %v", l.lease, want)
	}
	kctx := l.KeepAlive(ctx)
	f.settle(t)
	f.clk.advance(l.lease - time.Millisecond)
	wantLive(t, kctx, "1ms before the local deadline")
	f.clk.advance(time.Millisecond)
	wantLost(t, kctx, "at the local deadline")
	st, err := f.store.InspectLock(ctx, l.Key())
	if err != nil || st.Owner != l.Owner() {
		t.Fatalf("the store should still hold the lease at the local deadline: %+v, %v", st, err)
	}
	f.gate.set(nil)
	if err := l.Release(ctx); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Release after the local deadline: %v, want LockLost", err)
	}
	if _, err := f.store.InspectLock(ctx, l.Key()); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("Release after loss left the record: %v", err)
	}
}

func TestSafetyMarginOption(t *testing.T) {
	f := newFixture(t, WithSafetyMargin(0.05, 100*time.Millisecond))
	l := f.acquire(t, 10*time.Second)
	if want := 10*time.Second - 500*time.Millisecond - 100*time.Millisecond; l.lease != want {
		t.Fatalf("lease counted locally %v, want %v", l.lease, want)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Option{WithSafetyMargin(0.5, 0), WithSafetyMargin(-0.1, 0), WithSafetyMargin(0, -time.Millisecond)} {
		if _, err := New(memory.New(), "c", "dc1", o); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("New with a bad margin: %v, want InvalidArgument", err)
		}
	}
	m, err := New(memory.New(), "c", "dc1", WithSafetyMargin(0, 600*time.Millisecond), WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryAcquire(context.Background(), "x", TTL(time.Second)); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("a margin over half the TTL: %v, want InvalidArgument", err)
	}
}

// Deadline is the send time plus the lease less the margin, on the real clock.
func TestDeadline(t *testing.T) {
	m, err := New(memory.New(), "c", "dc1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease := 10*time.Second - 100*time.Millisecond - DefaultMargin
	before := time.Now()
	l, err := m.TryAcquire(ctx, "x", TTL(10*time.Second))
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	// Never late (the safety property); early only by the time Deadline itself takes
	// (a generous bound: the check is that it is not absurdly early).
	if d := l.Deadline(); d.Before(before.Add(lease-time.Second)) || d.After(after.Add(lease)) {
		t.Fatalf("Deadline %v not within [%v, %v]", d, before.Add(lease-time.Second), after.Add(lease))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A wall-clock step never extends the local deadline, and a forward step (which ends a
// SQLite lease early) shortens it.
func TestWallClockSteps(t *testing.T) {
	ctx := context.Background()
	t.Run("Backward", func(t *testing.T) {
		f := newFixture(t)
		f.gate.set(failWith(errOutage))
		l := f.acquire(t, 10*time.Second)
		kctx := l.KeepAlive(ctx)
		f.settle(t)
		f.clk.stepWall(-time.Hour)
		f.clk.advance(l.lease - time.Millisecond)
		wantLive(t, kctx, "1ms before the deadline")
		f.clk.advance(time.Millisecond)
		wantLost(t, kctx, "at the monotonic deadline after a backward step")
		_ = l.Release(ctx)
	})
	t.Run("Forward", func(t *testing.T) {
		f := newFixture(t)
		f.gate.set(failWith(errOutage))
		l := f.acquire(t, 10*time.Second)
		kctx := l.KeepAlive(ctx)
		f.settle(t)
		f.clk.advance(time.Second)
		f.clk.stepWall(l.lease - time.Second) // the wall clock now says the lease is over
		f.clk.advance(l.lease / 10)           // the watchdog looks at least this often
		wantLost(t, kctx, "after a forward step past the lease")
		_ = l.Release(ctx)
	})
	t.Run("StoredExpiryIsNotTrusted", func(t *testing.T) {
		f := newFixture(t)
		f.gate.set(func(context.Context) (driver.LockState, error, bool) {
			return driver.LockState{Expires: f.clk.Wall().Add(time.Hour)}, nil, true
		})
		l := f.acquire(t, 10*time.Second)
		f.clk.advance(time.Second)
		if err := l.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if left := l.leftAt(l.sent, f.clk.now()); left != l.lease {
			t.Fatalf("after a refresh %v of the lease is left, want %v (from the send time)", left, l.lease)
		}
		f.gate.set(nil)
		_ = l.Release(ctx)
	})
}

// Defect: a second KeepAlive returned an already-cancelled context whose cause was not
// a dcsync error. It returns the running context.
func TestSecondKeepAlive(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	l := f.acquire(t, 3*time.Second)
	k1 := l.KeepAlive(ctx)
	k2 := l.KeepAlive(ctx)
	if k2 != k1 {
		t.Fatal("a second KeepAlive returned another context")
	}
	wantLive(t, k2, "second KeepAlive")

	// The store says the lease is gone: both see LockLost, and so does a third call.
	f.gate.set(failWith(driver.Errorf(dcsync.LockLost, "test", "injected")))
	f.settle(t)
	f.clk.advance(l.lease / 3)
	<-k1.Done()
	wantLost(t, k1, "after the store said lost")
	if k3 := l.KeepAlive(ctx); k3 != k1 {
		t.Fatal("KeepAlive after the loss returned another context")
	}
	if err := l.Refresh(ctx); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Refresh after the loss: %v, want LockLost", err)
	}
	f.gate.set(nil)
	_ = l.Release(ctx)
	wantLost(t, l.KeepAlive(ctx), "KeepAlive after Release")
	var de *dcsync.Error
	if !errors.As(context.Cause(l.KeepAlive(ctx)), &de) {
		t.Fatal("KeepAlive after Release: cause is not a *dcsync.Error")
	}
}

// Release ends a running KeepAlive's context with context.Canceled, not LockLost; a
// KeepAlive whose ctx ended can be started again.
func TestKeepAliveRestartAndRelease(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	l := f.acquire(t, 3*time.Second)
	pctx, cancel := context.WithCancel(ctx)
	k1 := l.KeepAlive(pctx)
	first := l.ka
	cancel()
	<-first.done // out of the schedule
	k2 := l.KeepAlive(ctx)
	if k2 == k1 {
		t.Fatal("KeepAlive after its ctx ended returned the ended context")
	}
	wantLive(t, k2, "restarted KeepAlive")
	f.settle(t)
	f.clk.advance(l.lease / 3)
	f.gate.waitCall(t, "restarted KeepAlive renews")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(k2); cause != context.Canceled {
		t.Fatalf("after Release the cause is %v, want context.Canceled", cause)
	}
}

// A LockLost from a caller's Refresh ends KeepAlive's context at once.
func TestRefreshLostEndsKeepAlive(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	l := f.acquire(t, 3*time.Second)
	kctx := l.KeepAlive(ctx)
	f.gate.set(failWith(driver.Errorf(dcsync.LockLost, "test", "injected")))
	if err := l.Refresh(ctx); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Refresh: %v, want LockLost", err)
	}
	wantLost(t, kctx, "after Refresh returned LockLost")
	f.gate.set(nil)
	_ = l.Release(ctx)
}
