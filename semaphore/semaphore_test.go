package semaphore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/semaphore"
	"github.com/dcsync/dcsync/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newManager(t *testing.T, s driver.Store, opts ...semaphore.Option) *semaphore.Manager {
	t.Helper()
	m, err := semaphore.New(s, "app", "dc1", append([]semaphore.Option{semaphore.WithTTL(30 * time.Second),
		semaphore.WithBackoff(time.Millisecond, 20*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func wantCode(t *testing.T, err error, code dcsync.Code, what string) {
	t.Helper()
	if dcsync.CodeOf(err) != code {
		t.Fatalf("%s: got %v (code %v), want code %v", what, err, dcsync.CodeOf(err), code)
	}
}

func TestOpenAcquireRelease(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m := newManager(t, s)
	sem, err := m.Open(ctx, "pool", 3)
	if err != nil {
		t.Fatal(err)
	}
	// Another number of permits is a Conflict, and changes nothing.
	_, err = m.Open(ctx, "pool", 4)
	wantCode(t, err, dcsync.Conflict, "Open with 4 of a 3-permit semaphore")
	if !errors.Is(err, dcsync.ErrConflict) || !strings.Contains(err.Error(), "has 3 permits") {
		t.Fatalf("Open conflict: %v", err)
	}
	// n out of range: InvalidArgument, nothing written.
	_, err = sem.TryAcquire(ctx, 4)
	wantCode(t, err, dcsync.InvalidArgument, "TryAcquire 4 of 3")
	_, err = sem.TryAcquire(ctx, 0)
	wantCode(t, err, dcsync.InvalidArgument, "TryAcquire 0")
	if st, err := m.Status(ctx, "pool"); err != nil || len(st.Held) != 0 || st.Permits != 3 {
		t.Fatalf("status after refused acquires: %+v, %v", st, err)
	}

	p2, err := sem.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := sem.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx, 1)
	wantCode(t, err, dcsync.LockUnavailable, "TryAcquire with every permit granted")
	seen := map[int]bool{}
	for _, p := range append(p2.Permits(), p1.Permits()...) {
		if seen[p.Slot] || p.Slot < 0 || p.Slot >= 3 || p.Token == 0 || p.Owner == "" {
			t.Fatalf("permit %+v: slots must be distinct and below 3", p)
		}
		seen[p.Slot] = true
	}
	st, err := m.Status(ctx, "pool")
	if err != nil || st.Permits != 3 || len(st.Held) != 3 {
		t.Fatalf("status: %+v, %v", st, err)
	}
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A release wakes a waiting acquirer of this process at once: with an hour's
	// backoff only the wake-up can end its wait.
	slow := newManager(t, s, semaphore.WithBackoff(time.Hour, time.Hour))
	ssem, err := slow.Open(ctx, "pool", 3)
	if err != nil {
		t.Fatal(err)
	}
	p2, err = ssem.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		p, err := ssem.Acquire(ctx, 1, semaphore.Wait(time.Minute))
		if err == nil {
			err = p.Release(ctx)
		}
		done <- err
	}()
	for ssem.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let it reach its pause
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("woken acquirer: %v", err)
	}
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Release by owner id.
	p, err := sem.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	ps := p.Permits()
	if err := m.Release(ctx, "pool", []string{ps[0].Owner, ps[1].Owner}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, m.Release(ctx, "pool", []string{ps[0].Owner}), dcsync.LockLost, "release by an owner holding nothing")
	wantCode(t, p.Release(ctx), dcsync.LockLost, "Release of permits released by owner id")
}

func TestValidation(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m := newManager(t, s)
	for _, n := range []int{0, -1, semaphore.MaxPermits + 1} {
		_, err := m.Open(ctx, "x", n)
		wantCode(t, err, dcsync.InvalidArgument, "Open with bad permits")
	}
	_, err := m.Open(ctx, strings.Repeat("a", dcsync.MaxNameLen-18), 1)
	wantCode(t, err, dcsync.InvalidArgument, "name whose slot names do not fit")
	if _, err := m.Open(ctx, strings.Repeat("a", dcsync.MaxNameLen-19), 1); err != nil {
		t.Fatalf("longest name: %v", err)
	}
	wantCode(t, m.Resize(ctx, "absent", 2), dcsync.NotFound, "Resize of a semaphore that does not exist")
	_, err = m.Status(ctx, "absent")
	wantCode(t, err, dcsync.NotFound, "Status of a semaphore that does not exist")
}

func TestResize(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m := newManager(t, s)
	sem, err := m.Open(ctx, "r", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Resize(ctx, "r", 4); err != nil {
		t.Fatal(err)
	}
	// Growing applies at once, to the open Semaphore too.
	p, err := sem.TryAcquire(ctx, 4)
	if err != nil {
		t.Fatalf("TryAcquire 4 after growing to 4: %v", err)
	}
	// Shrinking waits for the slots above the new count.
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = m.Resize(rctx, "r", 1)
	cancel()
	wantCode(t, err, dcsync.LockUnavailable, "Resize to 1 while 4 are granted, ctx ending")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Resize error %v does not match ctx's", err)
	}
	if _, err := m.Open(ctx, "r", 1); err != nil {
		t.Fatalf("Open with the new count: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Resize(ctx, "r", 1) }()
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx, 2)
	wantCode(t, err, dcsync.InvalidArgument, "TryAcquire 2 of 1")
	st, err := m.Status(ctx, "r")
	if err != nil || st.Permits != 1 || st.Max != 4 || len(st.Held) != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
}

func TestKeepAliveEndsWhenAPermitIsLost(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m := newManager(t, s)
	sem, err := m.Open(ctx, "k", 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.Acquire(ctx, 2, semaphore.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	kctx := p.KeepAlive(ctx)
	if p.KeepAlive(ctx) != kctx {
		t.Fatal("a second KeepAlive returned another context")
	}
	// Another party frees one permit's lock: the store answers the next renewal
	// LockLost... renewals come at a third of the lease, so break it by owner id and
	// wait for KeepAlive to see it at its first renewal (about 3 s into a 10 s lease).
	victim := p.Permits()[1]
	if err := m.Release(ctx, "k", []string{victim.Owner}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-kctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("KeepAlive's context still live a minute after a permit was lost")
	}
	wantCode(t, context.Cause(kctx), dcsync.LockLost, "KeepAlive's cause")
	wantCode(t, p.Release(ctx), dcsync.LockLost, "Release with a permit lost")
}
