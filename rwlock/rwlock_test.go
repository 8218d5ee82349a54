package rwlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counting wraps a store and counts the calls that reach it.
type counting struct {
	driver.Store
	calls   atomic.Int64
	batches atomic.Int64 // RefreshLocks calls
	renewed atomic.Int64 // leases renewed by them
	singles atomic.Int64 // RefreshLock calls
}

func (c *counting) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	c.calls.Add(1)
	return c.Store.AcquireLock(ctx, k, owner, ttl)
}

func (c *counting) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	c.calls.Add(1)
	return c.Store.ReleaseLock(ctx, k, owner)
}

func (c *counting) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	c.calls.Add(1)
	return c.Store.InspectLock(ctx, k)
}

func (c *counting) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	c.calls.Add(1)
	c.singles.Add(1)
	return c.Store.RefreshLock(ctx, k, owner, ttl)
}

// InspectLocks is one call (the store's batch), as a LockBatcher's.
func (c *counting) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	c.calls.Add(1)
	return driver.InspectLocks(ctx, c.Store, keys)
}

func (c *counting) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	c.calls.Add(1)
	c.batches.Add(1)
	c.renewed.Add(int64(len(reqs)))
	return driver.RefreshLocks(ctx, c.Store, reqs)
}

func (c *counting) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, v []byte) (driver.Register, error) {
	c.calls.Add(1)
	return c.Store.(driver.RegisterStore).SwapRegister(ctx, k, gen, v)
}

func (c *counting) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	c.calls.Add(1)
	return c.Store.(driver.RegisterStore).ReadRegisters(ctx, keys)
}

func newManager(t *testing.T, s driver.LockStore, opts ...rwlock.Option) *rwlock.Manager {
	t.Helper()
	m, err := rwlock.New(s, "app", "dc1", append([]rwlock.Option{rwlock.WithTTL(time.Minute), rwlock.WithBackoff(time.Millisecond, 20*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestReadersShareWritersExclude(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m := newManager(t, s)
	r1, err := m.AcquireRead(ctx, "doc")
	must(t, err, "read 1")
	r2, err := m.AcquireRead(ctx, "doc", rwlock.Wait(0))
	must(t, err, "read 2 beside read 1")
	if r1.Slot() == r2.Slot() || r1.Mode() != rwlock.Read {
		t.Fatalf("two readers in slot %d and %d (mode %v)", r1.Slot(), r2.Slot(), r1.Mode())
	}
	if _, err := m.AcquireWrite(ctx, "doc", rwlock.Wait(0)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("write beside readers: %v, want LockUnavailable", err)
	}
	// The failed writer gave W back: a reader still gets in.
	r3, err := m.AcquireRead(ctx, "doc", rwlock.Wait(0))
	must(t, err, "read after a writer gave up")
	st, err := m.Inspect(ctx, "doc")
	must(t, err, "inspect")
	if st.Slots != rwlock.DefaultReaders || st.Writer != nil || len(st.Readers) != 3 {
		t.Fatalf("inspect: %+v, want 3 readers of %d slots, no writer", st, rwlock.DefaultReaders)
	}
	for _, r := range []*rwlock.Lock{r1, r2, r3} {
		must(t, r.Release(ctx), "release read")
	}
	w, err := m.AcquireWrite(ctx, "doc", rwlock.Wait(0))
	must(t, err, "write once readers left")
	if _, err := m.AcquireRead(ctx, "doc", rwlock.Wait(0)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("read beside a writer: %v, want LockUnavailable", err)
	}
	if _, err := m.AcquireWrite(ctx, "doc", rwlock.Wait(0)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("second writer: %v, want LockUnavailable", err)
	}
	tok := w.Token()
	must(t, w.Release(ctx), "release write")
	w2, err := m.AcquireWrite(ctx, "doc", rwlock.Wait(0))
	must(t, err, "write again")
	if w2.Token() <= tok {
		t.Fatalf("writer token %d after %d: not increasing", w2.Token(), tok)
	}
	must(t, w2.Release(ctx), "release")
	st, err = m.Inspect(ctx, "doc")
	must(t, err, "inspect")
	if st.Writer != nil || len(st.Readers) != 0 {
		t.Fatalf("inspect after all released: %+v", st)
	}
}

func TestReaderSlotsStoredOnce(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m2 := newManager(t, s, rwlock.WithReaders(2))
	m9 := newManager(t, s, rwlock.WithReaders(9))
	a, err := m2.AcquireRead(ctx, "few")
	must(t, err, "read a")
	// m9 finds M = 2 stored: the third reader waits, whatever m9's own option.
	b, err := m9.AcquireRead(ctx, "few", rwlock.Wait(0))
	must(t, err, "read b")
	if _, err := m9.AcquireRead(ctx, "few", rwlock.Wait(0)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("third reader of 2 slots: %v, want LockUnavailable", err)
	}
	st, err := m9.Inspect(ctx, "few")
	must(t, err, "inspect")
	if st.Slots != 2 {
		t.Fatalf("stored slots %d, want 2", st.Slots)
	}
	must(t, a.Release(ctx), "release a")
	must(t, b.Release(ctx), "release b")
	// Never used: Inspect writes nothing and reports 0 slots.
	if st, err := m9.Inspect(ctx, "unused"); err != nil || st.Slots != 0 {
		t.Fatalf("inspect of an unused name: %+v, %v", st, err)
	}
}

func TestInvalidNameWritesNothing(t *testing.T) {
	ctx := context.Background()
	c := &counting{Store: memory.New()}
	defer c.Close()
	m := newManager(t, c, rwlock.WithReaders(rwlock.MaxReaders))
	long := strings.Repeat("x", dcsync.MaxNameLen-len("rwlock:512:/r1023")+1)
	// Too long for any M (its key of slot 0 is over the limit): no store call at all.
	tooLong := strings.Repeat("x", dcsync.MaxNameLen-len("rwlock:512:/r0")+1)
	for _, name := range []string{"", tooLong} {
		if _, err := m.AcquireRead(ctx, name); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Fatalf("read %d bytes: %v, want InvalidArgument", len(name), err)
		}
		if _, err := m.AcquireWrite(ctx, name); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Fatalf("write %d bytes: %v, want InvalidArgument", len(name), err)
		}
	}
	if n := c.calls.Load(); n != 0 {
		t.Fatalf("%d store calls for invalid names, want 0", n)
	}
	// Too long for this Manager's M = 1024 but not for a smaller stored M: refused after
	// the register read (one a call), before any write: nothing is stored.
	if _, err := m.AcquireRead(ctx, long); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("read %d bytes: %v, want InvalidArgument", len(long), err)
	}
	if _, err := m.AcquireWrite(ctx, long); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("write %d bytes: %v, want InvalidArgument", len(long), err)
	}
	if n := c.calls.Load(); n != 2 {
		t.Fatalf("%d store calls for a name too long for M = 1024, want 2 (the register reads)", n)
	}
	if st, err := m.Inspect(ctx, long); err != nil || st.Slots != 0 {
		t.Fatalf("inspect after the refusals: %+v, %v; want nothing stored", st, err)
	}
	// One byte shorter fits.
	r, err := m.AcquireRead(ctx, long[1:])
	must(t, err, "read of the longest name")
	must(t, r.Release(ctx), "release")
	if _, err := rwlock.New(memory.New(), "app", "dc1", rwlock.WithReaders(0)); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("0 readers: %v", err)
	}
}

// TestStoreCalls counts the store calls of a read and a write lock round trip.
func TestStoreCalls(t *testing.T) {
	ctx := context.Background()
	c := &counting{Store: memory.New()}
	defer c.Close()
	m := newManager(t, c)
	r, err := m.AcquireRead(ctx, "calls")
	must(t, err, "first read")
	must(t, r.Release(ctx), "release")
	for _, tc := range []struct {
		mode rwlock.Mode
		want int64
	}{{rwlock.Read, 3}, {rwlock.Write, 3}, {rwlock.Read, 3}} {
		before := c.calls.Load()
		var l *rwlock.Lock
		if tc.mode == rwlock.Read {
			l, err = m.AcquireRead(ctx, "calls")
		} else {
			l, err = m.AcquireWrite(ctx, "calls")
		}
		must(t, err, "acquire")
		must(t, l.Release(ctx), "release")
		if n := c.calls.Load() - before; n != tc.want {
			t.Fatalf("%v lock+unlock: %d store calls, want %d", tc.mode, n, tc.want)
		}
	}
}

func TestDowngrade(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m := newManager(t, s)
	w, err := m.AcquireWrite(ctx, "d")
	must(t, err, "write")
	kctx := w.KeepAlive(ctx)
	r, err := w.Downgrade(ctx)
	must(t, err, "downgrade")
	if r.Mode() != rwlock.Read || !r.Held() {
		t.Fatalf("downgraded hold: mode %v held %v", r.Mode(), r.Held())
	}
	if kctx.Err() == nil {
		t.Fatal("the write hold's KeepAlive context still runs after the downgrade")
	}
	if _, err := w.Downgrade(ctx); err == nil {
		t.Fatal("second downgrade of one write hold succeeded")
	}
	if _, err := r.Downgrade(ctx); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("downgrade of a read hold: %v", err)
	}
	// Readers come in beside it; a writer does not.
	r2, err := m.AcquireRead(ctx, "d", rwlock.Wait(0))
	must(t, err, "read beside the downgraded hold")
	if _, err := m.AcquireWrite(ctx, "d", rwlock.Wait(0)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("writer beside the downgraded hold: %v", err)
	}
	must(t, r.Release(ctx), "release")
	must(t, r2.Release(ctx), "release")
	w2, err := m.AcquireWrite(ctx, "d", rwlock.Wait(0))
	must(t, err, "writer after")
	if w2.Token() <= w.Token() {
		t.Fatalf("token %d after %d", w2.Token(), w.Token())
	}
	must(t, w2.Release(ctx), "release")
}

// A writer waiting for a reader longer than its lease keeps W alive meanwhile: W keeps
// its holder (owner and token) past the lease, and no other writer takes it.
func TestWriterKeepsWAliveWhileWaiting(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 15 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	m := newManager(t, s)
	r, err := m.AcquireRead(ctx, "slow")
	must(t, err, "read")
	r.KeepAlive(ctx)
	type result struct {
		l   *rwlock.Lock
		err error
	}
	a, b := make(chan result, 1), make(chan result, 1)
	go func() {
		l, err := m.AcquireWrite(ctx, "slow", rwlock.TTL(10*time.Second))
		a <- result{l, err}
	}()
	var first *rwlock.State
	for first == nil {
		st, err := m.Inspect(ctx, "slow")
		must(t, err, "inspect")
		if st.Writer != nil {
			first = &st
		}
		time.Sleep(10 * time.Millisecond)
	}
	go func() {
		l, err := newManager(t, s).AcquireWrite(ctx, "slow", rwlock.TTL(10*time.Second))
		b <- result{l, err}
	}()
	time.Sleep(15 * time.Second) // past W's 10 s lease
	st, err := m.Inspect(ctx, "slow")
	must(t, err, "inspect")
	if st.Writer == nil || st.Writer.Owner != first.Writer.Owner || st.Writer.Token != first.Writer.Token {
		t.Fatalf("W after 15 s of a 10 s lease: %+v, want the waiting writer's %+v still", st.Writer, first.Writer)
	}
	must(t, r.Release(ctx), "release read")
	ra := <-a
	must(t, ra.err, "writer A")
	if ra.l.Token() != first.Writer.Token || !ra.l.Held() {
		t.Fatalf("writer A got in with token %d (held %v), want W's %d", ra.l.Token(), ra.l.Held(), first.Writer.Token)
	}
	select {
	case rb := <-b:
		t.Fatalf("writer B got in beside A: %v", rb.err)
	default:
	}
	must(t, ra.l.Release(ctx), "release A")
	rb := <-b
	must(t, rb.err, "writer B")
	must(t, rb.l.Release(ctx), "release B")
}

// A writer whose ctx or wait ends while readers hold gives W back: readers come in
// again at once.
func TestWriterGivesUpAndGivesWBack(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m := newManager(t, s)
	r, err := m.AcquireRead(ctx, "g")
	must(t, err, "read")
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = m.AcquireWrite(cctx, "g")
	if !errors.Is(err, dcsync.ErrLockUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("writer whose ctx ended: %v, want LockUnavailable matching ctx's error", err)
	}
	_, err = m.AcquireWrite(ctx, "g", rwlock.Wait(300*time.Millisecond))
	if !errors.Is(err, dcsync.ErrLockUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("writer whose wait ran out: %v, want LockUnavailable", err)
	}
	st, err := m.Inspect(ctx, "g")
	must(t, err, "inspect")
	if st.Writer != nil {
		t.Fatalf("W still held after the writers gave up: %+v", st.Writer)
	}
	r2, err := newManager(t, s).AcquireRead(ctx, "g", rwlock.Wait(0))
	must(t, err, "a reader after the writers gave up")
	must(t, r.Release(ctx), "release")
	must(t, r2.Release(ctx), "release")
	// And a reader's wait runs out while a writer holds.
	w, err := m.AcquireWrite(ctx, "g")
	must(t, err, "write")
	if _, err := m.AcquireRead(ctx, "g", rwlock.Wait(200*time.Millisecond)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("reader beside a writer: %v", err)
	}
	must(t, w.Release(ctx), "release")
}

// The KeepAlives of one Manager's holds, read and write, of several read-write locks,
// are renewed together: one batched call per renewal interval.
func TestKeepAlivesRenewedInOneCall(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a renewal")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &counting{Store: memory.New()}
	defer c.Close()
	m := newManager(t, c, rwlock.WithTTL(10*time.Second))
	var holds []*rwlock.Lock
	for _, name := range []string{"a", "b", "c"} {
		r, err := m.AcquireRead(ctx, name)
		must(t, err, "read")
		holds = append(holds, r)
	}
	w, err := m.AcquireWrite(ctx, "d")
	must(t, err, "write")
	holds = append(holds, w)
	for _, l := range holds {
		l.KeepAlive(ctx)
	}
	for c.renewed.Load()+c.singles.Load() < int64(len(holds)) {
		time.Sleep(50 * time.Millisecond)
	}
	if b, n, one := c.batches.Load(), c.renewed.Load(), c.singles.Load(); b != 1 || n != int64(len(holds)) || one != 0 {
		t.Fatalf("first renewal of %d holds: %d batched calls renewing %d leases and %d single renewals, want 1 call renewing all", len(holds), b, n, one)
	}
	for _, l := range holds {
		must(t, l.Release(ctx), "release")
	}
}
