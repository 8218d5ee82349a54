package latch

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
)

// guard bounds a test's waits: a Wait that should return but hangs fails the test with
// a context error instead of hanging the run. Tests never assert how long anything took.
const guard = 20 * time.Second

// fakeStore is a memory store that counts ReadLatches calls, can fail every batch that
// holds one bad latch name, and can run a hook after each read.
type fakeStore struct {
	*memory.Store

	mu        sync.Mutex
	reads     int
	badName   string
	badErr    error
	afterRead func(keys []dcsync.Key) // runs after the store has read, before returning
	wrapAdd   bool                    // AddLatch returns a wrapped count, as a buggy store would
}

func newFake() *fakeStore { return &fakeStore{Store: memory.New()} }

func (f *fakeStore) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	f.mu.Lock()
	f.reads++
	bad, badErr, hook := f.badName, f.badErr, f.afterRead
	f.mu.Unlock()
	for _, k := range keys {
		if bad != "" && k.Name == bad {
			return nil, badErr
		}
	}
	res, err := f.Store.ReadLatches(ctx, keys)
	if hook != nil {
		hook(keys)
	}
	return res, err
}

func (f *fakeStore) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	n, err := f.Store.AddLatch(ctx, k, delta)
	f.mu.Lock()
	wrap := f.wrapAdd
	f.mu.Unlock()
	if err == nil && wrap {
		// What a store that adds without an overflow check returns at the edge.
		if delta > 0 {
			return math.MinInt64, nil
		}
		return math.MaxInt64, nil
	}
	return n, err
}

func (f *fakeStore) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// closingStore is a fakeStore that reports its Close on a Done channel.
type closingStore struct {
	*fakeStore
	once sync.Once
	done chan struct{}
}

func (c *closingStore) Done() <-chan struct{} { return c.done }

func (c *closingStore) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Store.Close()
}

// watcherOf returns the shared watcher of s, or nil.
func watcherOf(s driver.LatchStore) *watcher {
	watchers.Lock()
	defer watchers.Unlock()
	return watchers.m[s]
}

// waiting returns how many Waits are registered with s's watcher.
func waiting(s driver.LatchStore) int {
	if w := watcherOf(s); w != nil {
		return w.stats().Waits
	}
	return 0
}

// waitUntil polls cond until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// settle waits until s's watcher is between critical sections, so that everything one
// read delivered has been delivered.
func settle(s driver.LatchStore) {
	if w := watcherOf(s); w != nil {
		w.mu.Lock()
		//lint:ignore SA2001 an empty critical section is the point
		w.mu.Unlock()
	}
}

func goWait(ctx context.Context, l *CountDownLatch) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- l.Wait(ctx) }()
	return ch
}

func mustManager(t *testing.T, s driver.LatchStore, opts ...Option) *Manager {
	t.Helper()
	m, err := New(s, "app", "dc1", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestWaitIsNotFinishedByAReadBegunBeforeIt pins defect 1: a Wait that joins while the
// watcher's read is in flight was finished by that read, which saw the store before the
// Wait began (a Wait begun at count 1 returned nil; right after a create it returned
// NotFound).
func TestWaitIsNotFinishedByAReadBegunBeforeIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before sets up the latch as the in-flight read sees it; change then moves it
		// to a state in which the second Wait must not return.
		before, change func(ctx context.Context, m *Manager) error
		// firstErr is what the first Wait (begun before the read) must return.
		firstErr error
	}{
		{
			name: "count went up",
			before: func(ctx context.Context, m *Manager) error {
				_, err := m.CreateCountUpDown(ctx, "x", 0)
				return err
			},
			change: func(ctx context.Context, m *Manager) error {
				l, _ := m.GetCountUpDown("x")
				_, err := l.CountUp(ctx)
				return err
			},
		},
		{
			name:   "latch created",
			before: func(ctx context.Context, m *Manager) error { return nil },
			change: func(ctx context.Context, m *Manager) error {
				_, err := m.CreateCountUpDown(ctx, "x", 1)
				return err
			},
			firstErr: dcsync.ErrNotFound,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			defer cancel()
			f := newFake()
			entered, gate := make(chan struct{}), make(chan struct{})
			var once sync.Once
			f.afterRead = func([]dcsync.Key) {
				once.Do(func() { close(entered); <-gate })
			}
			m := mustManager(t, f, WithPollInterval(time.Hour))
			if err := tc.before(ctx, m); err != nil {
				t.Fatal(err)
			}
			x, _ := m.GetCountDown("x")
			first := goWait(ctx, x)
			<-entered // the watcher has read x and is held before reporting it
			if err := tc.change(ctx, m); err != nil {
				t.Fatal(err)
			}
			second := goWait(ctx, x)
			waitUntil(t, "both waits are registered", func() bool { return waiting(f) == 2 })
			close(gate)
			if err := <-first; !errors.Is(err, tc.firstErr) || (tc.firstErr == nil && err != nil) {
				t.Fatalf("first Wait = %v, want %v", err, tc.firstErr)
			}
			settle(f)
			select {
			case err := <-second:
				t.Fatalf("second Wait, begun at count 1, returned %v from a read begun before it", err)
			default:
			}
			// A count-down begun after the second Wait ends it.
			l, _ := m.GetCountDown("x")
			if _, err := l.CountDown(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-second; err != nil {
				t.Fatalf("second Wait after the count-down = %v", err)
			}
		})
	}
}

// TestWaiterChurnDoesNotAddReads pins defect 2: every waiter that arrived or left made
// the watcher read every latch at once (81 reads in 2 s at a 1 s interval). However
// waiters come and go — on the awaited latch, on new latches, and with the loop
// stopping and starting again — the watcher reads at most once per interval: with a
// one-hour interval, once in this test.
func TestWaiterChurnDoesNotAddReads(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	f := newFake()
	m := mustManager(t, f, WithPollInterval(time.Hour))
	const n = 40
	var ls []*CountDownLatch
	for _, name := range []string{"x", "y"} {
		l, err := m.CreateCountDown(ctx, name, 1)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	stay, leave := context.WithCancel(ctx)
	stayed := goWait(stay, ls[0])
	waitUntil(t, "the first read", func() bool { return f.readCount() >= 1 })
	churn := func(l *CountDownLatch, want int) {
		t.Helper()
		c, stop := context.WithCancel(ctx)
		done := goWait(c, l)
		waitUntil(t, "the waiter registers", func() bool { return waiting(f) == want })
		stop()
		<-done
	}
	for i := 0; i < n; i++ {
		churn(ls[i%2], 2) // the awaited latch, and one nobody else awaits
	}
	leave() // the last waiter leaves: the loop stops
	if err := <-stayed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want a context.Canceled error", err)
	}
	for i := 0; i < n; i++ {
		churn(ls[i%2], 1) // each starts the loop again
	}
	if got := f.readCount(); got != 1 {
		t.Fatalf("the watcher read %d times while %d waiters came and went; want 1 per interval", got, 2*n+1)
	}
}

// TestOneBadLatchFailsOnlyItsWaiters pins defect 3: one latch the store cannot read
// failed every waiter on the store (InvalidArgument) or hung them all (any other error,
// retried for ever). The watcher isolates the bad key: its waiters get its error, the
// others keep waiting and return when their latch reaches zero.
func TestOneBadLatchFailsOnlyItsWaiters(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"invalid argument", driver.Errorf(dcsync.InvalidArgument, "fake.ReadLatches", "bad key")},
		{"unreadable cell", driver.Errorf(dcsync.Internal, "fake.ReadLatches", "cell count_dc1 is 3 bytes, not 8")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			defer cancel()
			f := newFake()
			f.badName, f.badErr = "bad", tc.err
			m := mustManager(t, f, WithPollInterval(time.Millisecond))
			good, err := m.CreateCountDown(ctx, "good", 1)
			if err != nil {
				t.Fatal(err)
			}
			bad, err := m.CreateCountDown(ctx, "bad", 1)
			if err != nil {
				t.Fatal(err)
			}
			goodDone := goWait(ctx, good)
			waitUntil(t, "the good latch is awaited", func() bool { return waiting(f) == 1 })
			badDone := goWait(ctx, bad)
			waitUntil(t, "the bad latch is awaited or failed", func() bool { return waiting(f) == 2 || len(badDone) == 1 })
			// Good reaches zero behind the watcher's back: only a read can see it.
			if _, err := f.Store.AddLatch(ctx, good.Key(), -1); err != nil {
				t.Fatal(err)
			}
			if err := <-goodDone; err != nil {
				t.Fatalf("Wait on the good latch = %v, want nil", err)
			}
			if err := <-badDone; !errors.Is(err, tc.err) {
				t.Fatalf("Wait on the bad latch = %v, want the store's %v", err, tc.err)
			}
		})
	}
}

// TestCloseEndsWaits pins defect 4: a Wait in progress when its store was closed never
// returned (the watcher retried and warned for ever), and the watcher map kept the
// closed store. A store that reports its Close (Done) ends every Wait at once with a
// Connection error, and a Wait on a closed store returns that error at once.
func TestCloseEndsWaits(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	s := &closingStore{fakeStore: newFake(), done: make(chan struct{})}
	m := mustManager(t, s, WithPollInterval(time.Hour))
	x, err := m.CreateCountDown(ctx, "x", 1)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := m.GetCountDown("y") // does not exist: its Wait would end on the next read
	xDone := goWait(ctx, x)
	waitUntil(t, "the first read", func() bool { return s.readCount() >= 1 && waiting(s) == 1 })
	yDone := goWait(ctx, y)
	waitUntil(t, "both waits are registered", func() bool { return waiting(s) == 2 || len(yDone) == 1 })
	s.Close()
	for _, ch := range []<-chan error{xDone, yDone} {
		err := <-ch
		if !errors.Is(err, dcsync.ErrConnection) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait after Close = %v, want a Connection error saying the store closed", err)
		}
	}
	if err := x.Wait(ctx); !errors.Is(err, dcsync.ErrConnection) {
		t.Fatalf("Wait on a closed store = %v, want a Connection error", err)
	}
	waitUntil(t, "the watcher forgets the closed store", func() bool { return watcherOf(s) == nil })
}

// TestCloseEndsWaitsOnSQLite pins defect 4 on the real SQLite store, which does not (yet)
// report its Close: its reads then fail for good, and the watcher ends the Wait with that
// error instead of retrying for ever.
func TestCloseEndsWaitsOnSQLite(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "latch.db"))
	if err != nil {
		t.Fatal(err)
	}
	m := mustManager(t, s, WithPollInterval(10*time.Millisecond))
	x, err := m.CreateCountDown(ctx, "x", 1)
	if err != nil {
		t.Fatal(err)
	}
	done := goWait(ctx, x)
	waitUntil(t, "the wait registers", func() bool { return waiting(s) == 1 })
	s.Close()
	err = <-done
	var de *dcsync.Error
	if err == nil || !errors.As(err, &de) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after Close = %v, want a store error, not the test's deadline", err)
	}
	t.Logf("Wait after Close: %v", err)
}

// TestWaitErrorIsDcsyncError pins defect 5 (library side): Wait returned ctx's bare error
// while the README says every error is a *dcsync.Error. It is one now, with code
// RetriesExhausted, and still matches ctx's error.
func TestWaitErrorIsDcsyncError(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	f := newFake()
	m := mustManager(t, f, WithPollInterval(time.Millisecond))
	x, err := m.CreateCountDown(ctx, "x", 2)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err = x.Wait(short)
	var de *dcsync.Error
	if !errors.As(err, &de) || de.Code != dcsync.RetriesExhausted || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline = %#v (%v), want a RetriesExhausted *dcsync.Error matching DeadlineExceeded", err, err)
	}
	gone, cancel2 := context.WithCancel(ctx)
	cancel2()
	err = x.Wait(gone)
	if !errors.As(err, &de) || de.Code != dcsync.RetriesExhausted || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled ctx = %v, want a RetriesExhausted *dcsync.Error matching Canceled", err)
	}
}

// TestUpdateThatWrapsIsRefused pins defect 6 in the latch layer: a store that adds without
// an overflow check wrapped MaxInt64+1 to MinInt64, CountUp returned that and woke every
// local waiter ("await says done"). The latch now reports InvalidArgument, leaves the
// count as it was, and wakes nobody.
func TestUpdateThatWrapsIsRefused(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	f := newFake()
	m := mustManager(t, f, WithPollInterval(time.Hour))
	big, err := m.CreateCountUpDown(ctx, "big", math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, stop := context.WithCancel(ctx)
	done := goWait(waitCtx, &big.CountDownLatch)
	waitUntil(t, "the first read", func() bool { return f.readCount() >= 1 && waiting(f) == 1 })

	// The real memory store (whatever it does at the edge), then a store that wraps.
	for _, wrap := range []bool{false, true} {
		f.mu.Lock()
		f.wrapAdd = wrap
		f.mu.Unlock()
		n, err := big.CountUp(ctx)
		if !errors.Is(err, dcsync.ErrInvalidArgument) {
			t.Fatalf("wrap=%v: CountUp at MaxInt64 = %d, %v; want an InvalidArgument error", wrap, n, err)
		}
		if got, err := big.Count(ctx); err != nil || got != math.MaxInt64 {
			t.Fatalf("wrap=%v: count after the refused update = %d, %v; want MaxInt64", wrap, got, err)
		}
		select {
		case err := <-done:
			t.Fatalf("wrap=%v: the overflowing update woke a waiter: Wait = %v", wrap, err)
		default:
		}
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v", err)
	}
}

// TestLocalCountDownWakesWaits is the shape the conformance case WaitWakesOnLocalCountDown
// needs now: the local wake-up ends every Wait begun before the count-down (WatcherStats
// says when they have begun), and a later Wait is answered by the next read, which a
// manager with a short interval brings soon although another waits with an hour's.
func TestLocalCountDownWakesWaits(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	f := newFake()
	m := mustManager(t, f, WithPollInterval(time.Hour))
	l, err := m.CreateCountDown(ctx, "x", 2)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 20
	errs := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		go func() { errs <- l.Wait(ctx) }()
	}
	waitUntil(t, "every Wait has begun", func() bool { return m.WatcherStats().Waits == waiters })
	for i := 0; i < 2; i++ {
		if _, err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < waiters; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	quick := mustManager(t, f, WithPollInterval(10*time.Millisecond))
	lq, _ := quick.GetCountDown("x")
	if err := lq.Wait(ctx); err != nil {
		t.Fatalf("Wait on a latch already at zero = %v", err)
	}
	if st := m.WatcherStats(); st.Waits != 0 {
		t.Fatalf("WatcherStats after every Wait ended = %+v", st)
	}
}
