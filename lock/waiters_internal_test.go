package lock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// acqCount counts AcquireLock calls on the way to a store.
type acqCount struct {
	driver.Store
	n atomic.Int64
}

func (c *acqCount) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	c.n.Add(1)
	return c.Store.AcquireLock(ctx, k, owner, ttl)
}

// A lease that KeepAlive finds lost wakes the acquirers waiting in this process: here the
// store dropped the lease behind the holder's back, and the renewal a third into the
// lease is refused. The waiter backs off for an hour: only the wake-up lets it in.
func TestKeepAliveLossWakesWaiters(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &acqCount{Store: f.gate}
	holder, err := New(c, "billing", "dc1")
	if err != nil {
		t.Fatal(err)
	}
	holder.clk = f.clk
	waiter, err := New(c, "billing", "dc1", WithBackoff(time.Hour, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	l, err := holder.TryAcquire(ctx, "job", TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	kctx := l.KeepAlive(ctx)
	settle(t, holder)

	type res struct {
		l   *Lock
		err error
	}
	got := make(chan res, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "job", Wait(time.Hour))
		got <- res{l, err}
	}()
	for end := time.Now().Add(30 * time.Second); c.n.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the waiter never tried")
		}
	}
	f.gate.set(func(ctx context.Context) (driver.LockState, error, bool) {
		_ = f.store.ReleaseLock(ctx, l.Key(), l.Owner()) // the store lost the lease
		return driver.LockState{}, driver.Errorf(dcsync.LockLost, "test", "lease lapsed in the store"), true
	})
	f.clk.advance(l.lease / 3)
	f.gate.waitCall(t, "a third into the lease")
	select {
	case <-kctx.Done():
		wantLost(t, kctx, "after the renewal was refused")
	case <-time.After(30 * time.Second):
		t.Fatal("the refused renewal did not end KeepAlive's context")
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		if n := c.n.Load(); n != 3 {
			t.Fatalf("%d AcquireLock calls, want 3", n)
		}
		_ = r.l.Release(ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not woken by the lease loss")
	}
	_ = l.Release(ctx)
}
