package drivertest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

func locks(t *testing.T, s driver.LockStore, farm string, opts ...lock.Option) *lock.Manager {
	t.Helper()
	m, err := lock.New(s, client, farm, append([]lock.Option{lock.WithBackoff(5*time.Millisecond, 100*time.Millisecond),
		lock.WithLogger(quiet)}, opts...)...)
	must(t, err, "lock.New")
	return m
}

func runLock(t *testing.T, h Harness) {
	// The local deadline (sent + TTL -
	// margin) must come before the store ends the lease (applied + TTL): at the moment
	// KeepAlive declares the loss the store still holds the lease, and Release then
	// deletes it and reports LockLost. A 300 ms margin leaves room for a network round
	// trip; a store that ends leases early (rounding a TTL down, a clock ahead) fails.
	// A release wakes a waiting Acquire of the same process at once: with an hour's
	// backoff only the wake-up can end its wait (the bound below is on a hang).
	t.Run("AcquireWakesOnRelease", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		for _, lv := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
			name := unique(t)
			holder := locks(t, s, h.Farm, lock.WithLevel(lv))
			waiterFarm := h.Farm
			if lv == dcsync.XDC {
				waiterFarm = h.OtherFarm
			}
			waiter := locks(t, s, waiterFarm, lock.WithLevel(lv), lock.WithBackoff(time.Hour, time.Hour))
			l, err := holder.TryAcquire(ctx, name)
			must(t, err, "TryAcquire")
			got := make(chan *lock.Lock, 1)
			errs := make(chan error, 1)
			go func() {
				w, err := waiter.Acquire(ctx, name, lock.Wait(time.Minute))
				if err != nil {
					errs <- err
					return
				}
				got <- w
			}()
			waitFor(t, func() bool { return waiter.Waiting(name) == 1 }, "the Acquire to wait")
			time.Sleep(20 * time.Millisecond) // let it make its first try and start its backoff
			must(t, l.Release(ctx), "Release")
			select {
			case w := <-got:
				if w.Token() <= l.Token() {
					t.Fatalf("%v: woken waiter's token %d <= released token %d", lv, w.Token(), l.Token())
				}
				must(t, w.Release(ctx), "Release the woken waiter's lock")
			case err := <-errs:
				t.Fatalf("%v: waiting Acquire: %v", lv, err)
			case <-time.After(30 * time.Second):
				t.Fatalf("%v: the waiting Acquire was not woken by the release", lv)
			}
		}
	})

	t.Run("KeepAliveLossPrecedesStoreExpiry", func(t *testing.T) {
		noLeaks(t)
		ctx := ctxT(t, time.Minute)
		spy := newSpy(h.open(t))
		// A margin of 2.9 s of a 6 s lease: the store must still hold the lease when
		// this reads it after the declared loss, which a loaded machine does within
		// 2.9 s (a 300 ms margin of a 1 s lease was a timing assertion).
		m := locks(t, spy, h.Farm, lock.WithSafetyMargin(0, 2900*time.Millisecond))
		l, err := m.TryAcquire(ctx, unique(t), lock.TTL(6*time.Second))
		must(t, err, "TryAcquire")
		spy.failRefresh(driver.Errorf(dcsync.Connection, "drivertest", "injected outage"))
		kctx := l.KeepAlive(ctx)
		<-kctx.Done()
		if !errors.Is(context.Cause(kctx), dcsync.ErrLockLost) {
			t.Fatalf("cause = %v, want LockLost", context.Cause(kctx))
		}
		st, err := spy.Store.InspectLock(ctx, l.Key())
		must(t, err, "InspectLock at the declared loss (the store must still hold the lease)")
		if st.Owner != l.Owner() {
			t.Fatalf("holder at the declared loss = %q, want %q", st.Owner, l.Owner())
		}
		spy.failRefresh(nil)
		wantCode(t, l.Release(ctx), dcsync.LockLost, "Release after the declared loss")
		_, err = spy.Store.InspectLock(ctx, l.Key())
		wantCode(t, err, dcsync.NotFound, "InspectLock after Release")
	})

	t.Run("AcquireReleaseAndTokens", func(t *testing.T) {
		s := h.open(t)
		m := locks(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		l1, err := m.TryAcquire(ctx, name)
		must(t, err, "TryAcquire")
		if l1.Owner() == "" || l1.Token() == 0 {
			t.Fatalf("lock has owner %q token %d", l1.Owner(), l1.Token())
		}
		_, err = m.TryAcquire(ctx, name)
		wantCode(t, err, dcsync.LockUnavailable, "second TryAcquire")
		st, err := m.Inspect(ctx, name)
		must(t, err, "Inspect")
		if st.Owner != l1.Owner() || st.Token != l1.Token() || !st.Expires.After(time.Now().Add(-time.Minute)) {
			t.Fatalf("Inspect = %+v, want owner %s token %d", st, l1.Owner(), l1.Token())
		}
		must(t, l1.Release(ctx), "Release")
		_, err = m.Inspect(ctx, name)
		wantCode(t, err, dcsync.NotFound, "Inspect after release")
		wantCode(t, l1.Release(ctx), dcsync.LockLost, "second Release")
		l2, err := m.TryAcquire(ctx, name)
		must(t, err, "TryAcquire after release")
		if l2.Token() <= l1.Token() {
			t.Fatalf("token %d after %d: not increasing", l2.Token(), l1.Token())
		}
		if l2.Owner() == l1.Owner() {
			t.Fatal("two acquisitions share an owner id")
		}
		must(t, l2.Release(ctx), "Release")
	})

	t.Run("LevelsAndFarms", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		m1, m2 := locks(t, s, h.Farm), locks(t, s, h.OtherFarm)
		a, err := m1.TryAcquire(ctx, name)
		must(t, err, "DC lock in farm 1")
		b, err := m2.TryAcquire(ctx, name)
		must(t, err, "DC lock of the same name in farm 2 (independent)")
		x, err := m1.TryAcquire(ctx, name, lock.Level(dcsync.XDC))
		must(t, err, "XDC lock of the same name (independent of DC locks)")
		_, err = m2.TryAcquire(ctx, name, lock.Level(dcsync.XDC))
		wantCode(t, err, dcsync.LockUnavailable, "XDC lock from another farm")
		for _, l := range []*lock.Lock{a, b, x} {
			must(t, l.Release(ctx), "Release")
		}
		y, err := m2.TryAcquire(ctx, name, lock.Level(dcsync.XDC))
		must(t, err, "XDC lock from farm 2 after release")
		if y.Token() <= x.Token() {
			t.Fatalf("XDC token %d after %d: not increasing across farms", y.Token(), x.Token())
		}
		must(t, y.Release(ctx), "Release")
	})

	t.Run("OnlyTheOwnerReleases", func(t *testing.T) {
		s := h.open(t)
		m := locks(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		l, err := m.TryAcquire(ctx, name)
		must(t, err, "TryAcquire")
		wantCode(t, m.Release(ctx, name, "not-the-owner"), dcsync.LockLost, "Release by another owner")
		_, err = s.RefreshLock(ctx, l.Key(), "not-the-owner", time.Minute)
		wantCode(t, err, dcsync.LockLost, "Refresh by another owner")
		st, err := m.Inspect(ctx, name)
		must(t, err, "Inspect")
		if st.Owner != l.Owner() {
			t.Fatalf("holder changed to %q", st.Owner)
		}
		must(t, m.Release(ctx, name, l.Owner()), "Release by owner id")
	})

	t.Run("LapsedLeaseIsTakenOver", func(t *testing.T) {
		s := h.open(t)
		m := locks(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		old, err := m.TryAcquire(ctx, name, lock.TTL(time.Second))
		must(t, err, "TryAcquire")
		time.Sleep(1500 * time.Millisecond)
		next, err := m.TryAcquire(ctx, name, lock.TTL(time.Minute))
		must(t, err, "TryAcquire after the lease lapsed")
		if next.Token() <= old.Token() {
			t.Fatalf("token %d after expiry of %d: not increasing", next.Token(), old.Token())
		}
		wantCode(t, old.Refresh(ctx), dcsync.LockLost, "old holder's Refresh")
		// Lock.Refresh past its own deadline answers without asking the store: ask it.
		_, err = s.RefreshLock(ctx, old.Key(), old.Owner(), time.Minute)
		wantCode(t, err, dcsync.LockLost, "the store's RefreshLock by the old holder")
		wantCode(t, old.Release(ctx), dcsync.LockLost, "old holder's Release")
		st, err := m.Inspect(ctx, name)
		must(t, err, "Inspect")
		if st.Owner != next.Owner() || st.Token != next.Token() {
			t.Fatalf("the old holder disturbed the new one: %+v", st)
		}
		// A lapsed lease nobody took over is lost too.
		solo, err := m.TryAcquire(ctx, unique(t), lock.TTL(time.Second))
		must(t, err, "TryAcquire")
		time.Sleep(1500 * time.Millisecond)
		wantCode(t, solo.Refresh(ctx), dcsync.LockLost, "Refresh of a lapsed lease")
		_, err = s.RefreshLock(ctx, solo.Key(), solo.Owner(), time.Minute)
		wantCode(t, err, dcsync.LockLost, "the store's RefreshLock of a lapsed lease")
		must(t, next.Release(ctx), "Release")
	})

	t.Run("RefreshExtendsLease", func(t *testing.T) {
		s := h.open(t)
		m := locks(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		l, err := m.TryAcquire(ctx, name, lock.TTL(2*time.Second))
		must(t, err, "TryAcquire")
		before := l.Expires()
		time.Sleep(1200 * time.Millisecond)
		// What holds whatever the timing: the refresh succeeds while the lease runs by
		// the holder's own rule (Held), and nobody else acquires the lock while the
		// refreshed lease runs by that rule. A machine too slow to refresh within the
		// lease makes the check inconclusive, never failed.
		if err := l.Refresh(ctx); err != nil {
			if !errors.Is(err, dcsync.ErrLockLost) || l.Held() {
				t.Fatalf("Refresh while the lease ran: %v", err)
			}
			t.Logf("inconclusive: the lease ran out before the refresh (a loaded machine): %v", err)
			return
		}
		if !l.Expires().After(before) {
			t.Fatalf("Expires did not move: %v then %v", before, l.Expires())
		}
		time.Sleep(1200 * time.Millisecond) // past the first lease's end
		other, err := m.TryAcquire(ctx, name)
		if err == nil {
			// Held is read after the acquisition returned: were it true, the store ended
			// the refreshed lease before the holder's deadline.
			if l.Held() {
				t.Fatalf("another owner acquired the lock (token %d) while the refreshed lease ran", other.Token())
			}
			t.Logf("inconclusive: the refreshed lease ran out before the check (a loaded machine)")
			must(t, other.Release(ctx), "Release")
			return
		}
		wantCode(t, err, dcsync.LockUnavailable, "TryAcquire while refreshed lease runs")
		must(t, l.Release(ctx), "Release")
	})

	t.Run("KeepAliveHoldsPastTTL", func(t *testing.T) {
		noLeaks(t)
		s := h.open(t)
		m := locks(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		l, err := m.TryAcquire(ctx, name, lock.TTL(time.Second))
		must(t, err, "TryAcquire")
		kctx := l.KeepAlive(ctx)
		time.Sleep(2500 * time.Millisecond)
		// What holds whatever the timing (renewals every third of a 1 s lease can come
		// late on a loaded machine): nobody else acquires the lock while the lease runs
		// by the holder's own rule, and a lease that ran out ends the keep-alive
		// context with LockLost.
		other, err := m.TryAcquire(ctx, name)
		if err == nil {
			if l.Held() {
				t.Fatalf("another owner acquired the lock (token %d) while the kept-alive lease ran", other.Token())
			}
			<-kctx.Done()
			if !errors.Is(context.Cause(kctx), dcsync.ErrLockLost) {
				t.Fatalf("the lease ran out, but the keep-alive context ended with %v", context.Cause(kctx))
			}
			t.Logf("inconclusive: a renewal came too late (a loaded machine)")
			must(t, other.Release(ctx), "Release")
			_ = l.Release(ctx)
			return
		}
		wantCode(t, err, dcsync.LockUnavailable, "TryAcquire while kept alive")
		if kctx.Err() != nil && l.Held() {
			t.Fatalf("keep-alive context ended while the lease ran: %v", context.Cause(kctx))
		}
		if err := l.Release(ctx); err != nil {
			if !errors.Is(err, dcsync.ErrLockLost) || kctx.Err() == nil {
				t.Fatalf("Release: %v", err)
			}
			t.Logf("inconclusive: the lease ran out after the check (a loaded machine): %v", err)
			return
		}
		<-kctx.Done()
		if errors.Is(context.Cause(kctx), dcsync.ErrLockLost) {
			t.Fatalf("Release reported as a lost lease: %v", context.Cause(kctx))
		}
		l2, err := m.TryAcquire(ctx, name)
		must(t, err, "TryAcquire after Release")
		must(t, l2.Release(ctx), "Release")
	})

	t.Run("KeepAliveSignalsLoss", func(t *testing.T) {
		noLeaks(t)
		ctx := ctxT(t, time.Minute)
		for _, tc := range []struct {
			name string
			err  error
			// released is what Release returns after the loss: a store that said
			// "lost" may still hold the record (the spy lied); an outage that outlived
			// the lease leaves nothing to release.
			released []dcsync.Code
		}{
			{"StoreSaysLost", driver.Errorf(dcsync.LockLost, "drivertest", "injected"), []dcsync.Code{0, dcsync.LockLost}},
			{"StoreUnreachable", driver.Errorf(dcsync.Connection, "drivertest", "injected outage"), []dcsync.Code{dcsync.LockLost}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				spy := newSpy(h.open(t))
				m := locks(t, spy, h.Farm)
				l, err := m.TryAcquire(ctx, unique(t), lock.TTL(time.Second))
				must(t, err, "TryAcquire")
				spy.failRefresh(tc.err)
				kctx := l.KeepAlive(ctx)
				select {
				case <-kctx.Done():
				case <-ctx.Done():
					t.Fatal("keep-alive never reported the lost lease")
				}
				if !errors.Is(context.Cause(kctx), dcsync.ErrLockLost) {
					t.Fatalf("cause = %v, want LockLost", context.Cause(kctx))
				}
				spy.failRefresh(nil)
				if code := dcsync.CodeOf(l.Release(ctx)); !slices.Contains(tc.released, code) {
					t.Fatalf("Release after loss: code %v, want one of %v", code, tc.released)
				}
			})
		}
	})

	t.Run("AcquireWaits", func(t *testing.T) {
		s := h.open(t)
		m := locks(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		held, err := m.TryAcquire(ctx, name)
		must(t, err, "TryAcquire")
		_, err = m.Acquire(ctx, name, lock.Wait(200*time.Millisecond))
		wantCode(t, err, dcsync.LockUnavailable, "Acquire with a short wait")
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = m.Acquire(cctx, name)
		cancel()
		wantCode(t, err, dcsync.LockUnavailable, "Acquire past ctx deadline")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire past ctx deadline: %v does not match context.DeadlineExceeded", err)
		}
		go func() {
			time.Sleep(300 * time.Millisecond)
			held.Release(context.Background())
		}()
		l, err := m.Acquire(ctx, name, lock.Wait(30*time.Second))
		must(t, err, "Acquire after the holder releases")
		if l.Token() <= held.Token() {
			t.Fatalf("token %d after %d", l.Token(), held.Token())
		}
		must(t, l.Release(ctx), "Release")
	})

	t.Run("ContendersNeverOverlap", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		name := unique(t)
		const workers, each = 8, 8
		var (
			holders atomic.Int32
			mu      sync.Mutex
			tokens  []uint64
			wg      sync.WaitGroup
		)
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			farm := h.Farm
			if w%2 == 1 {
				farm = h.OtherFarm // XDC: one holder across farms
			}
			m := locks(t, s, farm, lock.WithLevel(dcsync.XDC))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					l, err := m.Acquire(ctx, name, lock.TTL(30*time.Second), lock.Wait(2*time.Minute))
					if err != nil {
						errs <- err
						return
					}
					if n := holders.Add(1); n != 1 {
						errs <- errors.New("two holders at once")
					}
					mu.Lock()
					tokens = append(tokens, l.Token())
					mu.Unlock()
					time.Sleep(time.Millisecond)
					holders.Add(-1)
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(tokens) != workers*each {
			t.Fatalf("%d acquisitions, want %d", len(tokens), workers*each)
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("token %d follows %d: not strictly increasing (%v)", tokens[i], tokens[i-1], tokens)
			}
		}
	})
}
