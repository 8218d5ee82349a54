package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// These tests never depend on timing: acquirers back off for an hour, so only a wake-up
// can end their pauses, and every wait for a condition is bounded generously (a hang is
// a failure, not a slow pass).

// never is a backoff no test outlives: a waiter that retries did so because it was woken.
var never = lock.WithBackoff(time.Hour, time.Hour)

// counting passes every call to a store and counts AcquireLock calls. Each counting
// value stands for one process: waiter queues are kept per store value.
type counting struct {
	driver.Store
	acquires atomic.Int64
}

func (c *counting) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	c.acquires.Add(1)
	return c.Store.AcquireLock(ctx, k, owner, ttl)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("after 30s: %s", what)
}

func newManager(t *testing.T, s driver.Store, farm string, opts ...lock.Option) *lock.Manager {
	t.Helper()
	m, err := lock.New(s, "billing", farm, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type acquired struct {
	l   *lock.Lock
	err error
}

// goAcquire runs Acquire in a goroutine and returns where its result arrives.
func goAcquire(ctx context.Context, m *lock.Manager, name string, opts ...lock.CallOption) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := m.Acquire(ctx, name, append([]lock.CallOption{lock.Wait(time.Hour)}, opts...)...)
		ch <- acquired{l, err}
	}()
	return ch
}

func result(t *testing.T, ch <-chan acquired, what string) *lock.Lock {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.l
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: Acquire still waiting after 30s", what)
	}
	return nil
}

// A release in this process wakes its waiters at once. Before wake-ups, each waiter
// slept out its backoff (here an hour): every case below hung until its 30 s bound.
func TestReleaseWakesWaiters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Unix(1_800_000_000, 0)
	var clockMu sync.Mutex
	wall := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }

	cases := []struct {
		name  string
		level dcsync.Level
		farm  string // the waiter's farm; the holder's is dc1
		free  func(t *testing.T, holder *lock.Manager, l *lock.Lock)
	}{
		{"Release", dcsync.DC, "dc1", func(t *testing.T, _ *lock.Manager, l *lock.Lock) {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"ReleaseXDCOtherFarm", dcsync.XDC, "dc2", func(t *testing.T, _ *lock.Manager, l *lock.Lock) {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"ManagerReleaseByOwner", dcsync.DC, "dc1", func(t *testing.T, holder *lock.Manager, l *lock.Lock) {
			if err := holder.Release(ctx, "job", l.Owner(), lock.Level(l.Key().Level)); err != nil {
				t.Fatal(err)
			}
		}},
		{"LeaseLostOnRefresh", dcsync.DC, "dc1", func(t *testing.T, _ *lock.Manager, l *lock.Lock) {
			advance(2 * l.TTL()) // the store's lease lapses; nobody notices yet
			if err := l.Refresh(ctx); !errors.Is(err, dcsync.ErrLockLost) {
				t.Fatalf("Refresh after the lease lapsed: %v, want LockLost", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &counting{Store: memory.New(memory.WithClock(wall))}
			holder := newManager(t, s, "dc1", never, lock.WithLevel(tc.level))
			waiter := newManager(t, s, tc.farm, never, lock.WithLevel(tc.level))
			l, err := holder.TryAcquire(ctx, "job", lock.TTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ch := goAcquire(ctx, waiter, "job")
			waitFor(t, "the waiter's first try", func() bool { return s.acquires.Load() == 2 })
			if n := holder.Waiting("job"); n != 1 {
				t.Fatalf("Waiting = %d, want 1", n)
			}
			tc.free(t, holder, l)
			l2 := result(t, ch, "waiter after "+tc.name)
			if got := s.acquires.Load(); got != 3 {
				t.Fatalf("%d AcquireLock calls, want 3: the holder's, the waiter's first, the one its wake-up made", got)
			}
			if l2.Token() <= l.Token() {
				t.Fatalf("token %d after %d", l2.Token(), l.Token())
			}
			if err := l2.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := holder.Waiting("job"); n != 0 {
				t.Fatalf("Waiting = %d after the waiter returned", n)
			}
		})
	}
}

// Every non-fair waiter is woken; each asks the store once, one of them wins.
func TestReleaseWakesEveryNonFairWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &counting{Store: memory.New()}
	m := newManager(t, s, "dc1", never)
	l, err := m.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	chs := make([]<-chan acquired, n)
	for i := range chs {
		chs[i] = goAcquire(ctx, m, "job")
	}
	waitFor(t, "every waiter's first try", func() bool { return s.acquires.Load() == 1+n })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every waiter's second try", func() bool { return s.acquires.Load() == 1+2*n })
	// One waiter has the lock; the others sleep their hour. Release it and cancel them.
	var winner *lock.Lock
	cancel()
	for _, ch := range chs {
		r := <-ch
		switch {
		case r.err == nil && winner == nil:
			winner = r.l
		case r.err == nil:
			t.Fatal("two waiters took the lock")
		case !errors.Is(r.err, context.Canceled):
			t.Fatalf("a loser: %v, want its ctx's end", r.err)
		}
	}
	if winner == nil {
		t.Fatal("no waiter took the lock")
	}
	_ = winner.Release(context.Background())
}

// turns runs n goroutines that each take the lock k times through m. Each holder keeps
// the lock until every other goroutine with turns left waits for it, so that every
// release happens while all the others wait. It returns who took each turn. It may run
// outside the test's goroutine, so it reports failures as an error.
func turns(m *lock.Manager, n, k int, opts ...lock.CallOption) ([]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		order []int
		left  = make([]int, n)
		wg    sync.WaitGroup
	)
	for i := range left {
		left[i] = k
	}
	errs := make(chan error, n)
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < k; i++ {
				l, err := m.Acquire(ctx, "job", append([]lock.CallOption{lock.Wait(time.Hour)}, opts...)...)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				order = append(order, g)
				left[g]--
				others := 0
				for h, x := range left {
					if h != g && x > 0 {
						others++
					}
				}
				mu.Unlock()
				for m.Waiting("job") != others {
					if ctx.Err() != nil {
						errs <- fmt.Errorf("goroutine %d: %d others never all waited", g, others)
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return order, <-errs // nil when no worker failed
}

// Fair acquirers of one process take turns in arrival order, handing the lock over on
// release without polling (an hour's backoff), also across batches that yield.
func TestFairTurnsInArrivalOrder(t *testing.T) {
	for _, yield := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("yield=%v", yield), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s := &counting{Store: memory.New()}
			m := newManager(t, s, "dc1", never, lock.WithFairness(true), lock.WithYield(yield))
			// Hold the lock while the workers queue.
			start, err := m.TryAcquire(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			const n, k = 4, 5
			type res struct {
				order []int
				err   error
			}
			done := make(chan res, 1)
			go func() {
				order, err := turns(m, n, k)
				done <- res{order, err}
			}()
			waitFor(t, "all workers queued", func() bool { return m.Waiting("job") == n })
			waitFor(t, "the first worker's try", func() bool { return s.acquires.Load() == 2 })
			if err := start.Release(ctx); err != nil {
				t.Fatal(err)
			}
			var order []int
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatal(r.err)
				}
				order = r.order
			case <-time.After(3 * time.Minute):
				t.Fatal("workers still running after 3 minutes")
			}
			// turns started the workers in index order, but goroutines may reach
			// Acquire in any order: the first round fixes the rotation.
			for i := n; i < len(order); i++ {
				if order[i] != order[i-n] {
					t.Fatalf("turns %v: turn %d by %d, want %d (round-robin in arrival order)", order, i, order[i], order[i-n])
				}
			}
			for i := 1; i < len(order); i++ {
				if order[i] == order[i-1] {
					t.Fatalf("turns %v: worker %d took two turns in a row while others waited", order, order[i])
				}
			}
			// One store call per turn, plus the start and the first worker's try:
			// nobody polled; each handover was a wake-up.
			if got, want := s.acquires.Load(), int64(2+n*k); got != want {
				t.Fatalf("%d AcquireLock calls, want %d", got, want)
			}
		})
	}
}

// Without fairness the same workers may take turns in any order, and a releaser often
// takes the lock straight back. Nothing is asserted but termination: the count of
// back-to-back turns is logged for comparison with the fair mode.
func TestUnfairTurns(t *testing.T) {
	m := newManager(t, memory.New(), "dc1", lock.WithBackoff(time.Millisecond, 10*time.Millisecond))
	order, err := turns(m, 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	again := 0
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			again++
		}
	}
	t.Logf("non-fair: %d of %d turns were taken by the previous holder: %v", again, len(order)-1, order)
}

// A fair Acquire that cannot take its turn within its wait gives up without asking the
// store; a waiter that gives up passes the head of the queue on.
func TestFairQueueOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &counting{Store: memory.New()}
	m := newManager(t, s, "dc1", never, lock.WithFairness(true))
	holder, err := m.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	firstCtx, cancelFirst := context.WithCancel(ctx)
	first := goAcquire(firstCtx, m, "job")
	waitFor(t, "the first waiter's try", func() bool { return s.acquires.Load() == 2 })

	// Wait(0) behind a fair waiter: unavailable, no store call.
	_, err = m.Acquire(ctx, "job", lock.Wait(0))
	if dcsync.CodeOf(err) != dcsync.LockUnavailable || !strings.Contains(err.Error(), "earlier fair acquirer") {
		t.Fatalf("fair Wait(0) behind a waiter: %v", err)
	}
	// A non-fair call asks the store (and finds the lock held).
	if _, err := m.Acquire(ctx, "job", lock.Wait(0), lock.Fair(false)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("non-fair Wait(0): %v", err)
	}
	if got := s.acquires.Load(); got != 3 {
		t.Fatalf("%d AcquireLock calls, want 3", got)
	}

	second := goAcquire(ctx, m, "job")
	waitFor(t, "the second waiter queued", func() bool { return m.Waiting("job") == 2 })
	if got := s.acquires.Load(); got != 3 {
		t.Fatalf("the second waiter asked the store while the first waits: %d calls", got)
	}
	cancelFirst()
	if r := <-first; !errors.Is(r.err, context.Canceled) || dcsync.CodeOf(r.err) != dcsync.LockUnavailable {
		t.Fatalf("cancelled first waiter: %v", r.err)
	}
	// The second is first now and asks at once.
	waitFor(t, "the second waiter's try", func() bool { return s.acquires.Load() == 4 })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := result(t, second, "second waiter")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The batch of fair acquirers waiting when the process took the lock gets it in turn
// with no pause, however long the yield; after the batch, the process yields.
func TestFairBatchThenYield(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &counting{Store: memory.New()}
	m := newManager(t, s, "dc1", never, lock.WithFairness(true), lock.WithYield(time.Hour))
	holder, err := m.TryAcquire(ctx, "job") // not fair: its release imposes no yield
	if err != nil {
		t.Fatal(err)
	}
	var chs []<-chan acquired
	for i := 0; i < 3; i++ {
		chs = append(chs, goAcquire(ctx, m, "job"))
		waitFor(t, "the waiter queued", func() bool { return m.Waiting("job") == i+1 })
	}
	waitFor(t, "the first waiter's try", func() bool { return s.acquires.Load() == 2 })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chs {
		l := result(t, ch, fmt.Sprintf("waiter %d", i))
		for j, other := range chs[i+1:] {
			select {
			case <-other:
				t.Fatalf("waiter %d returned while waiter %d held the lock", i+1+j, i)
			default:
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.acquires.Load(); got != 5 {
		t.Fatalf("%d AcquireLock calls, want 5 (one per turn)", got)
	}
	// The batch is over: a new fair acquirer yields (Wait(0): gives up at once, without
	// asking the store); TryAcquire ignores fairness.
	_, err = m.Acquire(ctx, "job", lock.Wait(0))
	if dcsync.CodeOf(err) != dcsync.LockUnavailable || !strings.Contains(err.Error(), "other processes") {
		t.Fatalf("fair Wait(0) during the yield: %v", err)
	}
	if got := s.acquires.Load(); got != 5 {
		t.Fatalf("a fair Acquire asked the store during the yield: %d calls", got)
	}
	l, err := m.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire during the yield: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Two store values on one store act as two processes. The fair process that releases
// the lock does not take it back while it yields: the other process's waiter, polling,
// gets it. (Without the yield, the releaser's next Acquire would ask the store at once,
// before the other process's next poll.)
func TestFairYieldsToOtherProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mem := memory.New()
	p1 := &counting{Store: mem}
	p2 := &counting{Store: mem}
	m1 := newManager(t, p1, "dc1", lock.WithFairness(true), lock.WithYield(time.Hour))
	m2 := newManager(t, p2, "dc1", lock.WithBackoff(time.Millisecond, 5*time.Millisecond))

	l1, err := m1.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	other := goAcquire(ctx, m2, "job")
	waitFor(t, "the other process polls", func() bool { return p2.acquires.Load() > 0 })
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := p1.acquires.Load()
	againCtx, cancelAgain := context.WithCancel(ctx)
	again := goAcquire(againCtx, m1, "job")

	l2 := result(t, other, "the other process's waiter")
	if got := p1.acquires.Load(); got != before {
		t.Fatalf("the releasing process asked the store %d time(s) during its yield", got-before)
	}
	cancelAgain()
	if r := <-again; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the yielding Acquire: %v, want its ctx's end", r.err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestYieldOption(t *testing.T) {
	if _, err := lock.New(memory.New(), "billing", "dc1", lock.WithYield(-time.Second)); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("negative yield: %v", err)
	}
}
