package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// These tests pin issue 14 defect 4: KeepAlive, Deadline, Held and Refresh agree, to
// the nanosecond, on which side of the lease's deadline an instant is, and a lease that
// is over stays over. They run on the fake clock: the deadline is put in the past by
// moving the clock, never by sleeping.

// jump moves both clocks by d WITHOUT firing the timers that fall due: a timer that
// fires late, as on a loaded machine.
func (c *fakeClock) jump(d time.Duration) {
	c.mu.Lock()
	c.mono += d
	c.wall = c.wall.Add(d)
	c.mu.Unlock()
}

// wantOver checks that every view of the lease says it is over at the fake clock's
// present instant.
func wantOver(t *testing.T, f *fixture, l *Lock, what string) {
	t.Helper()
	if now, d := f.clk.Wall(), l.Deadline(); now.Before(d) {
		t.Fatalf("%s: Deadline %v is after the present %v", what, d, now)
	}
	if l.Held() {
		t.Fatalf("%s: Held says the lease runs", what)
	}
}

// wantRunning checks that every view of the lease says it still runs, and that
// Deadline is exactly left ahead of the present.
func wantRunning(t *testing.T, f *fixture, l *Lock, left time.Duration, what string) {
	t.Helper()
	if now, d := f.clk.Wall(), l.Deadline(); d.Sub(now) != left {
		t.Fatalf("%s: Deadline is %v ahead of the present, want %v", what, d.Sub(now), left)
	}
	if !l.Held() {
		t.Fatalf("%s: Held says the lease is over", what)
	}
}

// Defect 4: KeepAlive called after the lease's deadline armed a watchdog and returned a
// live context; until the watchdog fired (asynchronously, or here never, since the fake
// clock does not move) the caller believed it held a lock another process could take.
func TestKeepAliveAfterTheDeadlineReturnsACancelledContext(t *testing.T) {
	ctx := context.Background()
	for _, past := range []time.Duration{0, time.Nanosecond, time.Hour} {
		f := newFixture(t)
		l := f.acquire(t, 10*time.Second)
		f.clk.advance(l.lease + past)
		wantOver(t, f, l, "past the deadline")
		kctx := l.KeepAlive(ctx)
		wantLost(t, kctx, "KeepAlive called "+past.String()+" after the deadline")
		if k2 := l.KeepAlive(ctx); k2 != kctx {
			t.Fatal("a second KeepAlive after the loss returned another context")
		}
		select {
		case <-f.gate.calls:
			t.Fatal("KeepAlive past the deadline sent a renewal")
		default:
		}
		if err := l.Refresh(ctx); !errors.Is(err, dcsync.ErrLockLost) {
			t.Fatalf("Refresh after the loss: %v, want LockLost", err)
		}
		wantOver(t, f, l, "after KeepAlive declared the loss")
		if err := l.Release(ctx); !errors.Is(err, dcsync.ErrLockLost) {
			t.Fatalf("Release after the loss: %v, want LockLost", err)
		}
	}
}

// One nanosecond before the deadline every view says held, at the deadline every view
// says over.
func TestDeadlineKeepAliveAndHeldAgreeAtTheNanosecond(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.gate.set(failWith(errOutage)) // no renewal succeeds: the deadline stays put
	l := f.acquire(t, 10*time.Second)
	wantRunning(t, f, l, l.lease, "at the acquisition")
	f.clk.advance(l.lease - time.Nanosecond)
	wantRunning(t, f, l, time.Nanosecond, "1ns before the deadline")
	kctx := l.KeepAlive(ctx)
	wantLive(t, kctx, "KeepAlive 1ns before the deadline")
	f.clk.jump(time.Nanosecond) // the watchdog is due now but has not fired
	wantOver(t, f, l, "at the deadline, watchdog late")
	if k := l.KeepAlive(ctx); k != kctx {
		t.Fatal("KeepAlive at the deadline returned another context than the running one")
	}
	wantLost(t, kctx, "KeepAlive called at the deadline while the watchdog was late")
	_ = l.Release(ctx)
}

// A running KeepAlive whose watchdog is late: Refresh at or past the deadline does not
// ask the store and does not bring the lease back.
func TestRefreshPastTheDeadlineDoesNotRevive(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	l := f.acquire(t, 10*time.Second)
	f.clk.jump(l.lease)
	if err := l.Refresh(ctx); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Refresh at the deadline: %v, want LockLost", err)
	}
	select {
	case <-f.gate.calls:
		t.Fatal("Refresh at the deadline asked the store")
	default:
	}
	wantOver(t, f, l, "after a Refresh at the deadline")
	wantLost(t, l.KeepAlive(ctx), "KeepAlive after a Refresh at the deadline")
	_ = l.Release(ctx)
}

// A renewal sent before the deadline whose reply comes after it does not bring the
// lease back: the lease ended at the deadline, whatever the store says later.
func TestLateRenewalReplyDoesNotRevive(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	l := f.acquire(t, 10*time.Second)
	f.gate.set(func(context.Context) (driver.LockState, error, bool) {
		f.clk.jump(l.lease) // the reply is late: the deadline passes during the call
		return driver.LockState{}, nil, false
	})
	if err := l.Refresh(ctx); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Refresh whose reply came after the deadline: %v, want LockLost", err)
	}
	wantOver(t, f, l, "after a late renewal reply")
	f.gate.set(nil)
	_ = l.Release(ctx)
}

// A lease the store declared lost, or that was released, is over for Deadline and
// Held too, although its local deadline is still ahead.
func TestDeadlineAfterLossAndRelease(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	l := f.acquire(t, 10*time.Second)
	f.gate.set(failWith(driver.Errorf(dcsync.LockLost, "test", "injected")))
	if err := l.Refresh(ctx); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Refresh: %v, want LockLost", err)
	}
	wantOver(t, f, l, "after the store said lost")
	f.gate.set(nil)
	_ = l.Release(ctx)

	l = f.acquire(t, 10*time.Second)
	wantRunning(t, f, l, l.lease, "a new acquisition")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wantOver(t, f, l, "after Release")
	if err := l.Refresh(ctx); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Refresh after Release: %v, want LockLost", err)
	}
}
