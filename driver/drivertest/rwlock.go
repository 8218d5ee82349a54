package drivertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/rwlock"
)

// rwObserved wraps a store for the RWLock part: it calls onAcquire after every
// successful AcquireLock and onRelease before every ReleaseLock, and keeps the store's
// registers (a RegisterStore) and lock batches (a LockBatcher) reachable.
type rwObserved struct {
	driver.Store
	regs      driver.RegisterStore
	onAcquire func(k dcsync.Key, st driver.LockState)
	onRelease func(k dcsync.Key, owner string)
}

func (o *rwObserved) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	st, err := o.Store.AcquireLock(ctx, k, owner, ttl)
	if err == nil && o.onAcquire != nil {
		o.onAcquire(k, st)
	}
	return st, err
}

func (o *rwObserved) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	if o.onRelease != nil {
		o.onRelease(k, owner)
	}
	return o.Store.ReleaseLock(ctx, k, owner)
}

func (o *rwObserved) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, v []byte) (driver.Register, error) {
	return o.regs.SwapRegister(ctx, k, gen, v)
}

func (o *rwObserved) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	return o.regs.ReadRegisters(ctx, keys)
}

func (o *rwObserved) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return driver.InspectLocks(ctx, o.Store, keys)
}

func (o *rwObserved) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	return driver.RefreshLocks(ctx, o.Store, reqs)
}

// rwManager returns a read-write lock manager of the suite on s.
func rwManager(t testing.TB, s driver.LockStore, farm string, opts ...rwlock.Option) *rwlock.Manager {
	t.Helper()
	m, err := rwlock.New(s, client, farm, append([]rwlock.Option{rwlock.WithLogger(quiet), rwlock.WithTTL(time.Minute),
		rwlock.WithWait(2 * time.Minute), rwlock.WithBackoff(5*time.Millisecond, 100*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// isWriterKey reports whether k is the writer lock W of a read-write lock.
func isWriterKey(k dcsync.Key) bool {
	return strings.HasPrefix(k.Name, "rwlock:") && strings.HasSuffix(k.Name, "/w")
}

// rwCheck checks holds as they begin and end: never a writer beside a reader, never
// two writers, writer tokens strictly increasing; it counts the most readers at once.
type rwCheck struct {
	t        *testing.T
	readers  atomic.Int64
	writers  atomic.Int64
	maxRead  atomic.Int64
	lastW    atomic.Uint64
	failures atomic.Int64
}

func (c *rwCheck) fail(format string, args ...any) {
	c.failures.Add(1)
	c.t.Errorf(format, args...)
}

func (c *rwCheck) begin(l *rwlock.Lock) {
	if l.Mode() == rwlock.Write {
		w := c.writers.Add(1)
		if r := c.readers.Load(); w != 1 || r != 0 {
			c.fail("writer (token %d) in beside %d writer(s) and %d reader(s)", l.Token(), w-1, r)
		}
		if last := c.lastW.Swap(l.Token()); l.Token() <= last {
			c.fail("writer token %d after %d: not strictly increasing", l.Token(), last)
		}
		return
	}
	r := c.readers.Add(1)
	if w := c.writers.Load(); w != 0 {
		c.fail("reader (slot %d token %d) in beside %d writer(s)", l.Slot(), l.Token(), w)
	}
	for {
		if m := c.maxRead.Load(); r <= m || c.maxRead.CompareAndSwap(m, r) {
			break
		}
	}
}

func (c *rwCheck) end(l *rwlock.Lock) {
	if l.Mode() == rwlock.Write {
		c.writers.Add(-1)
	} else {
		c.readers.Add(-1)
	}
}

// runRWLock runs the read-write lock cases (package rwlock) on a store that keeps
// registers.
func runRWLock(t *testing.T, h Harness) {
	t.Run("ExclusiveGoroutines", func(t *testing.T) {
		noLeaks(t)
		ctx := ctxT(t, 3*time.Minute)
		// Two store values: acquirers on one hear each other's releases at once; those
		// on the other learn of them only by polling.
		stores := []driver.Store{h.open(t), h.open(t)}
		name := unique(t)
		c := &rwCheck{t: t}
		const goroutines, rounds = 6, 20
		var wg sync.WaitGroup
		for g := range goroutines {
			m := rwManager(t, stores[g%2], h.Farm, rwlock.WithReaders(4))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					var l *rwlock.Lock
					var err error
					if (g+i)%3 == 0 {
						l, err = m.AcquireWrite(ctx, name)
					} else {
						l, err = m.AcquireRead(ctx, name)
					}
					if err != nil {
						t.Errorf("goroutine %d round %d: %v", g, i, err)
						return
					}
					kctx := l.KeepAlive(ctx)
					c.begin(l)
					time.Sleep(time.Duration(rand.N(3)) * time.Millisecond)
					if kctx.Err() != nil {
						t.Errorf("goroutine %d: lease lost under the hold: %v", g, context.Cause(kctx))
					}
					c.end(l)
					if err := l.Release(ctx); err != nil {
						t.Errorf("goroutine %d release: %v", g, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("most readers at once: %d", c.maxRead.Load())
	})

	t.Run("ReadersOverlap", func(t *testing.T) {
		// R readers each hold until all R hold at once: with reads serialized (one
		// reader at a time) this never happens and the test fails when ctx ends.
		noLeaks(t)
		ctx := ctxT(t, 2*time.Minute)
		s := h.open(t)
		name := unique(t)
		const readers = 5
		var in atomic.Int64
		all := make(chan struct{})
		var wg sync.WaitGroup
		for g := range readers {
			m := rwManager(t, s, h.Farm)
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := m.AcquireRead(ctx, name)
				if err != nil {
					t.Errorf("reader %d: %v (readers serialized?)", g, err)
					return
				}
				if in.Add(1) == readers {
					close(all)
				}
				select {
				case <-all:
				case <-ctx.Done():
					t.Errorf("reader %d: only %d of %d readers held at once before the test's deadline: readers are serialized", g, in.Load(), readers)
				}
				must(t, l.Release(context.Background()), "release")
			}()
		}
		wg.Wait()
	})

	t.Run("WriterNotStarved", func(t *testing.T) { rwWriterNotStarved(t, h) })
	t.Run("DowngradeLeavesNoGap", func(t *testing.T) { rwDowngrade(t, h) })
	t.Run("MaxReadersLongestName", func(t *testing.T) { rwMaxReaders(t, h) })
	t.Run("CrashedHolders", func(t *testing.T) { rwCrashedHolders(t, h) })

	t.Run("Processes", func(t *testing.T) {
		if h.ProcessEnv == nil {
			t.Skip("store lives in one process; no multi-process cases")
		}
		t.Run("ExclusiveAcrossProcesses", func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "rw.log")
			must(t, os.WriteFile(file, nil, 0o644), "create log")
			const procs, each = 4, 12
			spawn(t, h, procs, "rwlock", unique(t), each, file)
			lines := readLines(t, file)
			if len(lines) != 2*procs*each {
				t.Fatalf("log has %d lines, want %d", len(lines), 2*procs*each)
			}
			maxRead := checkRWLog(t, lines)
			t.Logf("most readers at once across processes: %d", maxRead)
		})
		t.Run("ReadersOverlapAcrossProcesses", func(t *testing.T) {
			// Each child holds its read lock until every child's start line is in
			// the file: serialized readers never get there (the children fail).
			file := filepath.Join(t.TempDir(), "rw.log")
			must(t, os.WriteFile(file, nil, 0o644), "create log")
			const procs = 4
			spawn(t, h, procs, "rwread", unique(t), procs, file)
			lines := readLines(t, file)
			for i, l := range lines {
				if strings.HasPrefix(l, "start") != (i < procs) {
					t.Fatalf("line %d %q: want %d start lines (all readers in at once) before any end\n%s", i, l, procs, strings.Join(lines, "\n"))
				}
			}
		})
	})
}

// readLines returns the lines of file.
func readLines(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	must(t, err, "open log")
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// checkRWLog checks start/end lines "start|end read|write PID TOKEN SLOT": never a
// writer beside a reader or another writer, writer tokens strictly increasing, every
// hold ended. It returns the most readers at once.
func checkRWLog(t *testing.T, lines []string) int {
	t.Helper()
	type hold struct {
		pid  int
		slot int
		tok  uint64
	}
	readers := map[hold]bool{}
	var writer *hold
	var lastW uint64
	most := 0
	for i, line := range lines {
		var what, kind string
		var h hold
		if _, err := fmt.Sscanf(line, "%s %s %d %d %d", &what, &kind, &h.pid, &h.tok, &h.slot); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		switch what + " " + kind {
		case "start write":
			if writer != nil || len(readers) > 0 {
				t.Fatalf("line %d %q: a writer in beside writer %v and %d reader(s)", i, line, writer, len(readers))
			}
			if h.tok <= lastW {
				t.Fatalf("line %d %q: writer token %d after %d: not strictly increasing", i, line, h.tok, lastW)
			}
			lastW, writer = h.tok, &h
		case "end write":
			if writer == nil || *writer != h {
				t.Fatalf("line %d %q: ends a write hold that is not the one in (%v)", i, line, writer)
			}
			writer = nil
		case "start read":
			if writer != nil {
				t.Fatalf("line %d %q: a reader in beside writer %v", i, line, *writer)
			}
			readers[h] = true
			most = max(most, len(readers))
		case "end read":
			if !readers[h] {
				t.Fatalf("line %d %q: ends a read hold that is not in", i, line)
			}
			delete(readers, h)
		default:
			t.Fatalf("line %d %q: unknown", i, line)
		}
	}
	if writer != nil || len(readers) > 0 {
		t.Fatalf("holds never ended: writer %v, %d reader(s)", writer, len(readers))
	}
	return most
}

// childRWLock takes the XDC read-write lock env.name env.n times from farm env.farm, a
// write lock every third time (offset by env.index), and under it, while its
// KeepAlive context lasts, appends a start and an end line to the file env.arg.
func childRWLock(ctx context.Context, s driver.Store, env childEnv) error {
	m, err := rwlock.New(s, client, env.farm, rwlock.WithLevel(dcsync.XDC), rwlock.WithReaders(4), rwlock.WithLogger(quiet),
		rwlock.WithTTL(time.Minute), rwlock.WithWait(2*time.Minute), rwlock.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(env.arg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for i := range env.n {
		var l *rwlock.Lock
		if (env.index+i)%3 == 0 {
			l, err = m.AcquireWrite(ctx, env.name)
		} else {
			l, err = m.AcquireRead(ctx, env.name)
		}
		if err != nil {
			return err
		}
		kctx := l.KeepAlive(ctx)
		line := fmt.Sprintf("%s %d %d %d\n", l.Mode(), os.Getpid(), l.Token(), l.Slot())
		if _, err := f.WriteString("start " + line); err != nil {
			return err
		}
		time.Sleep(time.Duration(1+rand.N(3)) * time.Millisecond)
		if kctx.Err() != nil {
			return fmt.Errorf("lease lost under the hold: %w", context.Cause(kctx))
		}
		if _, err := f.WriteString("end " + line); err != nil {
			return err
		}
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// childRWRead takes a read lock of the XDC read-write lock env.name, appends a start
// line to env.arg, holds until the file has env.n start lines (every child's), then
// appends an end line and releases.
func childRWRead(ctx context.Context, s driver.Store, env childEnv) error {
	m, err := rwlock.New(s, client, env.farm, rwlock.WithLevel(dcsync.XDC), rwlock.WithLogger(quiet),
		rwlock.WithTTL(time.Minute), rwlock.WithWait(2*time.Minute), rwlock.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		return err
	}
	l, err := m.AcquireRead(ctx, env.name)
	if err != nil {
		return err
	}
	kctx := l.KeepAlive(ctx)
	f, err := os.OpenFile(env.arg, os.O_APPEND|os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	line := fmt.Sprintf("read %d %d %d\n", os.Getpid(), l.Token(), l.Slot())
	if _, err := f.WriteString("start " + line); err != nil {
		return err
	}
	for {
		b, err := os.ReadFile(env.arg)
		if err != nil {
			return err
		}
		if strings.Count(string(b), "start ") >= env.n {
			break
		}
		select {
		case <-kctx.Done():
			return fmt.Errorf("only %d of %d readers held at once before the hold ended (%v): readers are serialized",
				strings.Count(string(b), "start "), env.n, context.Cause(kctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := f.WriteString("end " + line); err != nil {
		return err
	}
	return l.Release(ctx)
}

// rwWriterNotStarved: readers keep coming, each holding until another reader has come
// in after it, so that a reader holds at every instant; a writer then asks. Writer
// preference lets it in: once it holds W (seen by the store wrapper), no reader that
// reads W afterwards comes in, so at most one more hold begins per reader (those that
// read W before). Without writer preference the readers' chain would never break.
func rwWriterNotStarved(t *testing.T, h Harness) {
	noLeaks(t)
	ctx := ctxT(t, 3*time.Minute)
	base := h.open(t)
	regs, err := driver.Registers(base, "drivertest")
	must(t, err, "registers")
	var wTaken atomic.Bool
	var starts, startsAtW atomic.Int64
	s := &rwObserved{Store: base, regs: regs, onAcquire: func(k dcsync.Key, _ driver.LockState) {
		if isWriterKey(k) && !wTaken.Load() {
			startsAtW.Store(starts.Load())
			wTaken.Store(true)
		}
	}}
	name := unique(t)
	c := &rwCheck{t: t}
	const readers, maxRounds = 4, 300
	var stop, writerIn atomic.Bool
	var wg sync.WaitGroup
	rounds := make([]int, readers)
	for g := range readers {
		m := rwManager(t, s, h.Farm)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ; !stop.Load() && rounds[g] < maxRounds; rounds[g]++ {
				l, err := m.AcquireRead(ctx, name)
				if err != nil {
					t.Errorf("reader %d: %v", g, err)
					return
				}
				c.begin(l)
				me := starts.Add(1)
				// Hold until another reader came in after this one (a chain of
				// overlapping readers), or W is taken, or the test ends.
				for starts.Load() == me && !wTaken.Load() && !stop.Load() && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				c.end(l)
				if err := l.Release(ctx); err != nil {
					t.Errorf("reader %d release: %v", g, err)
					return
				}
			}
		}()
	}
	// The writer asks once the chain runs, through another store value: the readers
	// learn of it from the store alone, not from this process's bookkeeping.
	for starts.Load() < 2*readers && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	wbase := h.open(t)
	wregs, err := driver.Registers(wbase, "drivertest")
	must(t, err, "registers")
	wm := rwManager(t, &rwObserved{Store: wbase, regs: wregs, onAcquire: s.onAcquire}, h.Farm)
	done := make(chan struct{})
	var after int64
	go func() {
		defer close(done)
		w, err := wm.AcquireWrite(ctx, name)
		if err != nil {
			t.Errorf("writer: %v", err)
			return
		}
		writerIn.Store(true)
		after = starts.Load() - startsAtW.Load()
		c.begin(w)
		c.end(w)
		must(t, w.Release(ctx), "writer release")
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	stop.Store(true)
	wg.Wait()
	<-done
	if !writerIn.Load() || slices.Max(rounds) >= maxRounds {
		t.Fatalf("the writer did not get in while readers kept coming (in: %v, reader rounds %v, bound %d): starved", writerIn.Load(), rounds, maxRounds)
	}
	if after > readers {
		t.Fatalf("%d read holds began after the writer took W, want at most %d (one per reader that read W before)", after, readers)
	}
	t.Logf("read holds begun after the writer took W: %d (at most %d)", after, readers)
}

// rwDowngrade: A downgrades its write hold while writer B waits. A's slot is taken
// before W is released (no instant without a hold); B takes W but does not come in
// before A's read hold ends, and a reader then waits for B (writer preference). With
// no writer waiting, a reader comes in beside a downgraded hold.
func rwDowngrade(t *testing.T, h Harness) {
	noLeaks(t)
	ctx := ctxT(t, 2*time.Minute)
	base := h.open(t)
	regs, err := driver.Registers(base, "drivertest")
	must(t, err, "registers")
	type event struct {
		acquire bool
		key     dcsync.Key
		owner   string
	}
	var mu sync.Mutex
	var events []event
	record := func(e event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	s := &rwObserved{Store: base, regs: regs,
		onAcquire: func(k dcsync.Key, st driver.LockState) { record(event{true, k, st.Owner}) },
		onRelease: func(k dcsync.Key, owner string) { record(event{false, k, owner}) }}
	name := unique(t)
	ma, mb, mc := rwManager(t, s, h.Farm), rwManager(t, s, h.Farm), rwManager(t, s, h.Farm)
	w, err := ma.AcquireWrite(ctx, name)
	must(t, err, "A write")
	var aReleasing atomic.Bool
	bDone := make(chan *rwlock.Lock, 1)
	go func() {
		l, err := mb.AcquireWrite(ctx, name)
		if err != nil {
			t.Errorf("B write: %v", err)
		} else if !aReleasing.Load() {
			t.Errorf("B got the write lock while A still held its downgraded read hold")
		}
		bDone <- l
	}()
	r, err := w.Downgrade(ctx)
	must(t, err, "A downgrade")
	rctx := r.KeepAlive(ctx)
	// No gap: A's slot was taken before A's W was released.
	mu.Lock()
	slotAt, wAt := -1, -1
	for i, e := range events {
		if e.acquire && e.owner == r.Owner() && e.key == r.Key() {
			slotAt = i
		}
		if !e.acquire && e.owner == w.Owner() && isWriterKey(e.key) && wAt < 0 {
			wAt = i
		}
	}
	mu.Unlock()
	if slotAt < 0 || wAt < 0 || slotAt > wAt {
		t.Fatalf("downgrade: slot taken at event %d, W released at event %d: a gap without a hold", slotAt, wAt)
	}
	// B takes W (after A released it) and waits for A's read hold to end.
	for {
		mu.Lock()
		taken := false
		for _, e := range events {
			taken = taken || (e.acquire && isWriterKey(e.key) && e.owner != w.Owner())
		}
		mu.Unlock()
		if taken || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := mc.AcquireRead(ctx, name, rwlock.Wait(0)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Errorf("a reader while writer B waits: %v, want LockUnavailable (writer preference)", err)
	}
	select {
	case <-bDone:
		t.Fatal("B got the write lock while A's read hold still held")
	default:
	}
	if rctx.Err() != nil {
		t.Fatalf("A's read hold was lost: %v", context.Cause(rctx))
	}
	aReleasing.Store(true)
	must(t, r.Release(ctx), "A release")
	bl := <-bDone
	if bl == nil {
		return
	}
	if bl.Token() <= w.Token() {
		t.Errorf("B's token %d is not above A's %d", bl.Token(), w.Token())
	}
	// No writer waits: a reader comes in beside B's downgraded hold.
	br, err := bl.Downgrade(ctx)
	must(t, err, "B downgrade")
	cl, err := mc.AcquireRead(ctx, name, rwlock.Wait(0))
	must(t, err, "a reader beside a downgraded hold")
	must(t, cl.Release(ctx), "C release")
	must(t, br.Release(ctx), "B release")
}
