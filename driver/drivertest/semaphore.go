package drivertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/semaphore"
)

// semaphores returns a semaphore manager on s in farm.
func semaphores(t testing.TB, s driver.Store, farm string, opts ...semaphore.Option) *semaphore.Manager {
	t.Helper()
	m, err := semaphore.New(s, client, farm, append([]semaphore.Option{semaphore.WithLevel(dcsync.XDC),
		semaphore.WithTTL(time.Minute), semaphore.WithBackoff(2*time.Millisecond, 50*time.Millisecond),
		semaphore.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatalf("semaphore.New: %v", err)
	}
	return m
}

// slotTokens records, in grant order, the tokens each permit slot was granted with.
type slotTokens struct {
	mu  sync.Mutex
	got map[int][]uint64
}

func (s *slotTokens) add(ps []semaphore.Permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got == nil {
		s.got = map[int][]uint64{}
	}
	for _, p := range ps {
		s.got[p.Slot] = append(s.got[p.Slot], p.Token)
	}
}

// check fails the test unless every slot's tokens strictly increase.
func (s *slotTokens) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for slot, toks := range s.got {
		for i := 1; i < len(toks); i++ {
			if toks[i] <= toks[i-1] {
				t.Fatalf("slot %d granted token %d after %d: tokens must strictly increase per slot", slot, toks[i], toks[i-1])
			}
		}
	}
}

// runSemaphore checks package semaphore on the store: never more than N permits
// granted (goroutines, OS processes, and under a shrink), tokens strictly increasing per
// slot, a crashed holder's permits returning after the lease, and all-or-nothing
// acquisition without deadlock.
func runSemaphore(t *testing.T, h Harness) {
	t.Run("NeverMoreThanN", func(t *testing.T) {
		noLeaks(t)
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		const N, workers, rounds = 3, 8, 12
		name := unique(t)
		var granted atomic.Int64
		var toks slotTokens
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			m := semaphores(t, s, []string{h.Farm, h.OtherFarm}[w%2])
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem, err := m.Open(ctx, name, N)
				if err != nil {
					errs <- err
					return
				}
				for range rounds {
					n := 1 + rand.N(2)
					p, err := sem.Acquire(ctx, n, semaphore.Wait(2*time.Minute))
					if err != nil {
						errs <- err
						return
					}
					toks.add(p.Permits())
					if g := granted.Add(int64(n)); g > N {
						errs <- fmt.Errorf("%d permits granted at once, more than N = %d", g, N)
						return
					}
					time.Sleep(time.Millisecond)
					granted.Add(-int64(n))
					if err := p.Release(ctx); err != nil {
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
		toks.check(t)
	})

	t.Run("NoWriteBeyondN", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		m := semaphores(t, s, h.Farm)
		name := unique(t)
		sem, err := m.Open(ctx, name, 2)
		must(t, err, "Open")
		_, err = sem.TryAcquire(ctx, 3)
		wantCode(t, err, dcsync.InvalidArgument, "TryAcquire 3 of 2 permits")
		_, err = m.Open(ctx, name, 5)
		wantCode(t, err, dcsync.Conflict, "Open with another number of permits")
		st, err := m.Status(ctx, name)
		must(t, err, "Status")
		if st.Permits != 2 || len(st.Held) != 0 {
			t.Fatalf("status after refused calls: %+v; want 2 permits, none held", st)
		}
	})

	t.Run("ShrinkUnderLoad", func(t *testing.T) {
		noLeaks(t)
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		const N, newN, workers = 4, 2, 6
		name := unique(t)
		var granted atomic.Int64
		var resized, stop atomic.Bool
		var rounds atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers+1)
		for w := range workers {
			m := semaphores(t, s, []string{h.Farm, h.OtherFarm}[w%2])
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem, err := m.Open(ctx, name, N)
				if err != nil && !errors.Is(err, dcsync.ErrConflict) {
					errs <- err
					return
				}
				if err != nil {
					sem, err = m.Open(ctx, name, newN) // resized before this one opened it
					if err != nil {
						errs <- err
						return
					}
				}
				for !stop.Load() {
					p, err := sem.Acquire(ctx, 1, semaphore.Wait(2*time.Minute))
					if err != nil {
						errs <- err
						return
					}
					// The flag is read BEFORE the count goes up: when it says the
					// Resize returned, every permit counted here was granted after.
					after := resized.Load()
					g := granted.Add(1)
					if g > N || (after && g > newN) {
						errs <- fmt.Errorf("%d permits granted at once (Resize to %d returned: %v)", g, newN, after)
						return
					}
					time.Sleep(2 * time.Millisecond)
					granted.Add(-1)
					rounds.Add(1)
					if err := p.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		// An acquirer that read N = 4 before the shrink and acquires only after it.
		m := semaphores(t, s, h.Farm)
		stale, err := semaphores(t, s, h.OtherFarm).Open(ctx, name, N)
		must(t, err, "Open")
		for rounds.Load() < 20 && ctx.Err() == nil && len(errs) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		if err := m.Resize(ctx, name, newN); err != nil {
			errs <- err
		}
		resized.Store(true)
		for at := rounds.Load(); rounds.Load() < at+40 && ctx.Err() == nil && len(errs) == 0; {
			time.Sleep(5 * time.Millisecond)
		}
		stop.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}

		// With the new N's permits all granted, the stale acquirer finds the slots
		// above it free, and must not be granted one.
		sem, err := m.Open(ctx, name, newN)
		must(t, err, "Open")
		low, err := sem.Acquire(ctx, newN, semaphore.Wait(2*time.Minute))
		must(t, err, "Acquire every permit of the new N")
		if p, err := stale.TryAcquire(ctx, 1); err == nil {
			t.Fatalf("an acquirer that read N = %d before the shrink was granted slot %v beside all %d permits of the new N", N, p.Permits(), newN)
		}
		// A shrink never returns nil while permits above the new N are granted: with
		// every slot of N = 4 granted, a Resize to 2 whose ctx ends returns an error.
		must(t, m.Resize(ctx, name, N), "Resize back to 4")
		high, err := sem.Acquire(ctx, N-newN, semaphore.Wait(2*time.Minute))
		must(t, err, "Acquire the permits above 2")
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err = m.Resize(rctx, name, newN)
		cancel()
		wantCode(t, err, dcsync.LockUnavailable, "Resize to 2 with slots 2 and 3 granted, its ctx ending")
		must(t, high.Release(ctx), "Release")
		must(t, low.Release(ctx), "Release")
		must(t, m.Resize(ctx, name, newN), "Resize to 2 once the slots above are free")
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		noLeaks(t)
		s := h.open(t)
		ctx := ctxT(t, 4*time.Minute)
		const N, rounds = 4, 6
		name := unique(t)
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		var granted atomic.Int64
		start := make(chan struct{})
		for w := range 2 {
			m := semaphores(t, s, []string{h.Farm, h.OtherFarm}[w%2])
			sem, err := m.Open(ctx, name, N)
			must(t, err, "Open")
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range rounds {
					// N/2+1 each: both cannot hold at once, and one holding a part
					// while waiting for the rest would deadlock the pair.
					p, err := sem.Acquire(ctx, N/2+1, semaphore.Wait(2*time.Minute))
					if err != nil {
						errs <- fmt.Errorf("acquire %d of %d (deadlocked?): %w", N/2+1, N, err)
						return
					}
					if g := granted.Add(N/2 + 1); g > N {
						errs <- fmt.Errorf("%d permits granted at once", g)
						return
					}
					time.Sleep(time.Millisecond)
					granted.Add(-(N/2 + 1))
					if err := p.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})

	t.Run("CrashedHolderReturns", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		const N = 2
		name := unique(t)
		// A holder that stops: no KeepAlive, no Release (its process is gone). Its
		// permits must come back when their 10 s leases end.
		gone := semaphores(t, s, h.Farm)
		sem, err := gone.Open(ctx, name, N)
		must(t, err, "Open")
		if _, err := sem.Acquire(ctx, N, semaphore.TTL(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		checkPermitsReturn(t, ctx, semaphores(t, s, h.OtherFarm), name, N, "a stopped holder")
	})

	t.Run("Processes", func(t *testing.T) {
		if h.ProcessEnv == nil {
			t.Skip("store lives in one process; no multi-process cases")
		}
		runSemaphoreProcesses(t, h)
	})
}

// childSemaphore takes 1 or 2 permits of the XDC semaphore env.name (N permits,
// env.arg "N:FILE") env.n times from farm env.farm and, under the permits' KeepAlive
// context, appends a start line (its pid, the permits' slots and tokens) and an end
// line to FILE.
func childSemaphore(ctx context.Context, s driver.Store, env childEnv) error {
	ns, file, _ := strings.Cut(env.arg, ":")
	N, err := strconv.Atoi(ns)
	if err != nil {
		return err
	}
	m, err := semaphore.New(s, client, env.farm, semaphore.WithLevel(dcsync.XDC),
		semaphore.WithBackoff(5*time.Millisecond, 100*time.Millisecond), semaphore.WithLogger(quiet))
	if err != nil {
		return err
	}
	sem, err := m.Open(ctx, env.name, N)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for i := range env.n {
		n := 1 + (i+env.index)%2
		p, err := sem.Acquire(ctx, n, semaphore.TTL(time.Minute), semaphore.Wait(2*time.Minute))
		if err != nil {
			return err
		}
		kctx := p.KeepAlive(ctx)
		var parts []string
		for _, q := range p.Permits() {
			parts = append(parts, fmt.Sprintf("%d:%d", q.Slot, q.Token))
		}
		if _, err := fmt.Fprintf(f, "start %d %s\n", os.Getpid(), strings.Join(parts, ",")); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
		if kctx.Err() != nil {
			return fmt.Errorf("permits lost while held: %v", context.Cause(kctx))
		}
		if _, err := fmt.Fprintf(f, "end %d\n", os.Getpid()); err != nil {
			return err
		}
		if err := p.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// childSemaphoreHold takes every one of the N (env.arg) permits of env.name with a
// 10 s lease, keeps them alive, prints "held" and waits to be killed.
func childSemaphoreHold(ctx context.Context, s driver.Store, env childEnv) error {
	N, err := strconv.Atoi(env.arg)
	if err != nil {
		return err
	}
	m, err := semaphore.New(s, client, env.farm, semaphore.WithLevel(dcsync.XDC), semaphore.WithLogger(quiet))
	if err != nil {
		return err
	}
	sem, err := m.Open(ctx, env.name, N)
	if err != nil {
		return err
	}
	p, err := sem.Acquire(ctx, N, semaphore.TTL(10*time.Second))
	if err != nil {
		return err
	}
	kctx := p.KeepAlive(ctx)
	fmt.Println("held")
	<-kctx.Done()
	return errors.New("not killed")
}

// runSemaphoreProcesses runs the semaphore's cases across OS processes.
func runSemaphoreProcesses(t *testing.T, h Harness) {
	t.Run("NeverMoreThanN", func(t *testing.T) {
		const procs, each, N = 4, 25, 3
		file := filepath.Join(t.TempDir(), "permits.log")
		must(t, os.WriteFile(file, nil, 0o644), "create log")
		spawn(t, h, procs, "semaphore", unique(t), each, fmt.Sprintf("%d:%s", N, file))
		checkPermitLog(t, file, N, procs*each)
	})

	t.Run("CrashedHolderReturns", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		const N = 2
		name := unique(t)
		c := startChild(t, h, "semhold", name, 0, 0, strconv.Itoa(N))
		waitOutput(t, ctx, c, "held")
		must(t, c.cmd.Process.Kill(), "kill child")
		checkPermitsReturn(t, ctx, semaphores(t, s, h.OtherFarm), name, N, "the killed holder")
	})
}

// checkPermitLog checks the start/end lines the children appended: at no point of the
// file are more than N permits between their start and end lines (the lines are
// appended while the permits are granted, so the file's order is the order in time of
// those instants), no slot is in two open intervals, and each slot's tokens strictly
// increase down the file.
func checkPermitLog(t *testing.T, file string, N, holds int) {
	t.Helper()
	f, err := os.Open(file)
	must(t, err, "open log")
	defer f.Close()
	open := map[int][]int{} // pid -> slots
	held := map[int]bool{}  // slots in open intervals
	last := map[int]uint64{}
	granted, starts := 0, 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			t.Fatalf("line %d %q: malformed", line, sc.Text())
		}
		pid, err := strconv.Atoi(fields[1])
		must(t, err, "pid")
		switch {
		case fields[0] == "start" && len(fields) == 3:
			starts++
			if open[pid] != nil {
				t.Fatalf("line %d: pid %d starts twice", line, pid)
			}
			for _, part := range strings.Split(fields[2], ",") {
				var slot int
				var tok uint64
				if _, err := fmt.Sscanf(part, "%d:%d", &slot, &tok); err != nil {
					t.Fatalf("line %d %q: %v", line, sc.Text(), err)
				}
				if held[slot] {
					t.Fatalf("line %d: slot %d granted while another holder's interval is open", line, slot)
				}
				if tok <= last[slot] {
					t.Fatalf("line %d: slot %d token %d after %d: not strictly increasing", line, slot, tok, last[slot])
				}
				held[slot], last[slot] = true, tok
				open[pid] = append(open[pid], slot)
				granted++
			}
			if granted > N {
				t.Fatalf("line %d: %d permits granted at once, more than N = %d", line, granted, N)
			}
		case fields[0] == "end":
			if open[pid] == nil {
				t.Fatalf("line %d: pid %d ends without a start", line, pid)
			}
			for _, slot := range open[pid] {
				delete(held, slot)
				granted--
			}
			delete(open, pid)
		default:
			t.Fatalf("line %d %q: malformed", line, sc.Text())
		}
	}
	must(t, sc.Err(), "read log")
	if starts != holds || granted != 0 {
		t.Fatalf("log has %d holds (%d permits still open), want %d", starts, granted, holds)
	}
}

// checkPermitsReturn checks, from m, that all N permits of semaphore name, held by
// holder (which will neither renew nor release them), are refused while its leases run
// and granted once they end.
func checkPermitsReturn(t *testing.T, ctx context.Context, m *semaphore.Manager, name string, N int, holder string) {
	t.Helper()
	sem, err := m.Open(ctx, name, N)
	must(t, err, "Open")
	_, err = sem.TryAcquire(ctx, 1)
	wantCode(t, err, dcsync.LockUnavailable, "TryAcquire while "+holder+"'s leases run")
	p, err := sem.Acquire(ctx, N, semaphore.Wait(2*time.Minute))
	must(t, err, "Acquire after "+holder+"'s leases")
	must(t, p.Release(ctx), "Release")
}
