package drivertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/lock"
)

// electionSpy wraps a store keeping registers: a store value of its own (so that the
// managers on it share no waiter queue or watcher with those on the store it wraps, as
// another process's would not), and counters of the calls Observe's watcher makes.
type electionSpy struct {
	driver.Store
	regs driver.RegisterStore

	regReads     atomic.Int64 // ReadRegisters calls begun
	lockReads    atomic.Int64 // InspectLocks calls begun
	lockReadsEnd atomic.Int64 // InspectLocks calls returned
	singleReads  atomic.Int64 // InspectLock calls
	maxBatch     atomic.Int64 // the most keys of one ReadRegisters
}

func newElectionSpy(t *testing.T, s driver.Store) *electionSpy {
	regs, err := driver.Registers(s, "drivertest")
	must(t, err, "registers")
	return &electionSpy{Store: s, regs: regs}
}

func (s *electionSpy) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	return s.regs.SwapRegister(ctx, k, gen, value)
}

func (s *electionSpy) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	s.regReads.Add(1)
	for {
		m := s.maxBatch.Load()
		if int64(len(keys)) <= m || s.maxBatch.CompareAndSwap(m, int64(len(keys))) {
			break
		}
	}
	return s.regs.ReadRegisters(ctx, keys)
}

func (s *electionSpy) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	s.singleReads.Add(1)
	return s.Store.InspectLock(ctx, k)
}

func (s *electionSpy) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	s.lockReads.Add(1)
	defer s.lockReadsEnd.Add(1)
	return driver.InspectLocks(ctx, s.Store, keys)
}

func (s *electionSpy) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	return driver.RefreshLocks(ctx, s.Store, reqs)
}

// elections returns an election manager on s for farm.
func (h Harness) elections(t *testing.T, s driver.Store, farm string, opts ...election.Option) *election.Manager {
	t.Helper()
	m, err := election.New(s, client, farm, append([]election.Option{election.WithPollInterval(h.PollInterval),
		election.WithLogger(quiet), election.WithTTL(time.Minute)}, opts...)...)
	must(t, err, "election.New")
	return m
}

// electionLock is the lock name of election name (the storage layout of package
// election, docs/election.md).
func electionLock(name string) string { return fmt.Sprintf("election:%d:%s", len(name), name) }

// next receives from ch, failing the test when nothing comes within a minute (a bound
// for a store that never answers, not a timing assertion).
func next(t *testing.T, ch <-chan election.Leader, what string) election.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the observer's channel closed", what)
		}
		return l
	case <-time.After(time.Minute):
		t.Fatalf("%s: nothing observed within a minute", what)
	}
	return election.Leader{}
}

// runElection checks package election on the store.
func runElection(t *testing.T, h Harness) {
	t.Run("LeaderProclaimResign", func(t *testing.T) {
		noLeaks(t)
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		m := h.elections(t, s, h.Farm)
		name := unique(t)
		if _, err := m.Leader(ctx, name); dcsync.CodeOf(err) != dcsync.NotFound {
			t.Fatalf("Leader of a new election = %v, want NotFound", err)
		}
		ld, err := m.Campaign(ctx, name, "v1")
		must(t, err, "Campaign")
		got, err := m.Leader(ctx, name)
		if err != nil || got.Token != ld.Token() || got.Value != "v1" || got.Pending {
			t.Fatalf("Leader after Campaign = %+v, %v; want token %d value v1", got, err, ld.Token())
		}
		must(t, ld.Proclaim(ctx, "v2"), "Proclaim")
		if got, err := m.Leader(ctx, name); err != nil || got.Token != ld.Token() || got.Value != "v2" {
			t.Fatalf("Leader after Proclaim = %+v, %v; want token %d value v2", got, err, ld.Token())
		}
		// Another farm at DC is another election; at XDC one across farms.
		other := h.elections(t, s, h.OtherFarm)
		if _, err := other.Leader(ctx, name); dcsync.CodeOf(err) != dcsync.NotFound {
			t.Fatalf("Leader in farm %s = %v, want NotFound (a DC election is per farm)", h.OtherFarm, err)
		}
		must(t, ld.Resign(ctx), "Resign")
		if ld.Context().Err() == nil {
			t.Fatal("leadership context still live after Resign")
		}
		if _, err := m.Leader(ctx, name); dcsync.CodeOf(err) != dcsync.NotFound {
			t.Fatalf("Leader after Resign = %v, want NotFound", err)
		}
		wantCode(t, ld.Proclaim(ctx, "v3"), dcsync.LockLost, "Proclaim after Resign")

		x1 := h.elections(t, s, h.Farm, election.WithLevel(dcsync.XDC))
		x2 := h.elections(t, newElectionSpy(t, h.open(t)), h.OtherFarm, election.WithLevel(dcsync.XDC))
		xl, err := x1.Campaign(ctx, name, "x")
		must(t, err, "XDC Campaign")
		if got, err := x2.Leader(ctx, name); err != nil || got.Token != xl.Token() || got.Value != "x" {
			t.Fatalf("XDC Leader from farm %s = %+v, %v; want token %d value x", h.OtherFarm, got, err, xl.Token())
		}
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = x2.Campaign(cctx, name, "y")
		cancel()
		wantCode(t, err, dcsync.LockUnavailable, "XDC Campaign from another farm while one leads")
		must(t, xl.Resign(ctx), "XDC Resign")
	})

	t.Run("Validation", func(t *testing.T) {
		s := newElectionSpy(t, h.open(t))
		ctx := ctxT(t, time.Minute)
		m := h.elections(t, s, h.Farm)
		long := strings.Repeat("n", dcsync.MaxNameLen-len(electionLock(""))-1) // 500: "election:500:" + 500 bytes is 513
		_, err := m.Campaign(ctx, long, "")
		wantCode(t, err, dcsync.InvalidArgument, "Campaign of a name whose key is too long")
		_, err = m.Campaign(ctx, "", "")
		wantCode(t, err, dcsync.InvalidArgument, "Campaign of an empty name")
		_, err = m.Campaign(ctx, unique(t), strings.Repeat("v", election.MaxValue+1))
		wantCode(t, err, dcsync.InvalidArgument, "Campaign of a value over MaxValue")
		_, err = m.Leader(ctx, long)
		wantCode(t, err, dcsync.InvalidArgument, "Leader of a name too long")
		_, err = m.Observe(ctx, "")
		wantCode(t, err, dcsync.InvalidArgument, "Observe of an empty name")
		if n := s.regReads.Load() + s.singleReads.Load() + s.lockReads.Load(); n != 0 {
			t.Fatalf("%d store reads for invalid input, want none", n)
		}
		// The longest name that fits works.
		fits := long[:len(long)-1]
		ld, err := m.Campaign(ctx, fits, strings.Repeat("v", election.MaxValue))
		must(t, err, "Campaign of the longest name and value")
		must(t, ld.Resign(ctx), "Resign")
	})

	t.Run("TokensIncreaseAndNeverTwoLeaders", func(t *testing.T) {
		noLeaks(t)
		ctx := ctxT(t, 2*time.Minute)
		name := unique(t)
		const workers, each = 4, 10
		var (
			mu     sync.Mutex
			inside int
			tokens []uint64
		)
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			// Each worker on a store value of its own: candidates of different
			// "processes", which only the store keeps apart.
			m := h.elections(t, newElectionSpy(t, h.open(t)), h.Farm, election.WithBackoff(time.Millisecond, 20*time.Millisecond))
			go func() {
				for i := 0; i < each; i++ {
					ld, err := m.Campaign(ctx, name, fmt.Sprint(i))
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					inside++
					two := inside > 1
					tokens = append(tokens, ld.Token())
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					inside--
					mu.Unlock()
					if two {
						errs <- fmt.Errorf("two leaders at once (token %d)", ld.Token())
						return
					}
					if err := ld.Resign(ctx); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for w := 0; w < workers; w++ {
			must(t, <-errs, "worker")
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("leader %d has token %d after %d: tokens must strictly increase", i, tokens[i], tokens[i-1])
			}
		}
	})

	t.Run("StaleProclaimRefused", func(t *testing.T) {
		noLeaks(t)
		ctx := ctxT(t, time.Minute)
		s := h.open(t)
		name := unique(t)
		a := h.elections(t, s, h.Farm)
		other := newElectionSpy(t, h.open(t))
		b := h.elections(t, other, h.Farm)
		la, err := a.Campaign(ctx, name, "a")
		must(t, err, "Campaign a")
		// a's lease ends behind its back (as when it pauses past its lease): its lock is
		// released by owner from elsewhere; a still believes it leads.
		lm, err := lock.New(other, client, h.Farm, lock.WithLogger(quiet))
		must(t, err, "lock.New")
		st, err := lm.Inspect(ctx, electionLock(name))
		must(t, err, "inspect a's lock")
		must(t, lm.Release(ctx, electionLock(name), st.Owner), "release a's lock")
		lb, err := b.Campaign(ctx, name, "b")
		must(t, err, "Campaign b")
		if lb.Token() <= la.Token() {
			t.Fatalf("b's token %d is not above a's %d", lb.Token(), la.Token())
		}
		regs, err := driver.Registers(s, "drivertest")
		must(t, err, "registers")
		before, err := regs.ReadRegisters(ctx, []dcsync.Key{lb.Key()})
		must(t, err, "read register")
		if la.Context().Err() != nil {
			t.Fatal("a's context ended already: the test did not make a stale leader")
		}
		wantCode(t, la.Proclaim(ctx, "stale"), dcsync.LockLost, "stale leader's Proclaim after a newer leader published")
		if c := context.Cause(la.Context()); dcsync.CodeOf(c) != dcsync.LockLost {
			t.Fatalf("stale leader's context cause = %v, want LockLost", c)
		}
		after, err := regs.ReadRegisters(ctx, []dcsync.Key{lb.Key()})
		must(t, err, "read register")
		if after[0].Register.Gen != before[0].Register.Gen || string(after[0].Register.Value) != string(before[0].Register.Value) {
			t.Fatalf("the stale Proclaim changed the register: generation %d -> %d", before[0].Register.Gen, after[0].Register.Gen)
		}
		if got, err := b.Leader(ctx, name); err != nil || got.Token != lb.Token() || got.Value != "b" {
			t.Fatalf("Leader after the stale Proclaim = %+v, %v; want b's token %d value b", got, err, lb.Token())
		}
		must(t, lb.Resign(ctx), "Resign b")
	})

	t.Run("ResignHandsOverInArrivalOrder", func(t *testing.T) {
		noLeaks(t)
		ctx := ctxT(t, time.Minute)
		// A store value of its own, and a backoff of an hour: a waiting candidate asks
		// the store again only when this process's Resign wakes it, so the test ends in
		// time only if Resign hands over at once.
		s := newElectionSpy(t, h.open(t))
		name := unique(t)
		m := h.elections(t, s, h.Farm, election.WithBackoff(time.Hour, time.Hour))
		lm, err := lock.New(s, client, h.Farm, lock.WithLogger(quiet))
		must(t, err, "lock.New")
		first, err := m.Campaign(ctx, name, "0")
		must(t, err, "Campaign 0")
		const n = 4
		won := make([]chan *election.Leadership, n)
		for i := range won {
			won[i] = make(chan *election.Leadership, 1)
			go func() {
				ld, err := m.Campaign(ctx, name, fmt.Sprint(i+1))
				if err != nil {
					t.Error(err)
				}
				won[i] <- ld
			}()
			for lm.Waiting(electionLock(name)) != i+1 {
				time.Sleep(time.Millisecond) // until candidate i waits: arrival order is i
			}
		}
		prev := first
		for i := range won {
			must(t, prev.Resign(ctx), "Resign")
			var ld *election.Leadership
			for ld == nil {
				select {
				case ld = <-won[i]:
					if ld == nil {
						t.FailNow()
					}
				case <-ctx.Done():
					t.Fatalf("candidate %d did not take over after Resign", i+1)
				case <-time.After(10 * time.Millisecond):
					for j := i + 1; j < n; j++ {
						select {
						case <-won[j]:
							t.Fatalf("candidate %d took leadership before candidate %d, who came first", j+1, i+1)
						default:
						}
					}
				}
			}
			if ld.Token() <= prev.Token() {
				t.Fatalf("candidate %d token %d not above %d", i+1, ld.Token(), prev.Token())
			}
			for j := i + 1; j < n; j++ {
				select {
				case <-won[j]:
					t.Fatalf("candidate %d took leadership before candidate %d, who came first", j+1, i+1)
				default:
				}
			}
			got, err := m.Leader(ctx, name)
			if err != nil || got.Value != fmt.Sprint(i+1) {
				t.Fatalf("Leader after hand-over %d = %+v, %v", i+1, got, err)
			}
			prev = ld
		}
		must(t, prev.Resign(ctx), "Resign last")
	})

	t.Run("ObserversSeeEveryLeader", func(t *testing.T) {
		noLeaks(t)
		ctx := ctxT(t, 2*time.Minute)
		name := unique(t)
		watch := newElectionSpy(t, h.open(t))
		om := h.elections(t, watch, h.Farm)
		octx, stop := context.WithCancel(ctx)
		ch, err := om.Observe(octx, name)
		must(t, err, "Observe")
		// Leaders elsewhere (another store value): the observer learns of them only by
		// reading. Each leads for more than 3 poll intervals, and until the watcher has
		// made a whole pass (registers, then locks) after it published.
		held := func(s *electionSpy) {
			pass := watch.regReads.Load() + 1
			time.Sleep(3 * h.PollInterval)
			for watch.lockReadsEnd.Load() < pass && ctx.Err() == nil {
				time.Sleep(h.PollInterval / 5)
			}
		}
		type seen struct {
			token uint64
			value string
		}
		var want []seen
		for i := 0; i < 4; i++ {
			lm := h.elections(t, newElectionSpy(t, h.open(t)), h.Farm)
			ld, err := lm.Campaign(ctx, name, fmt.Sprintf("leader-%d", i))
			must(t, err, "Campaign")
			want = append(want, seen{ld.Token(), ld.Value()})
			held(watch)
			if i == 1 {
				must(t, ld.Proclaim(ctx, "proclaimed"), "Proclaim")
				want = append(want, seen{ld.Token(), "proclaimed"})
				held(watch)
			}
			must(t, ld.Resign(ctx), "Resign")
		}
		for i, w := range want {
			got := next(t, ch, fmt.Sprintf("leader %d of %d", i+1, len(want)))
			if got.Token != w.token || got.Value != w.value || got.Name != name {
				t.Fatalf("observation %d = %+v, want token %d value %q", i+1, got, w.token, w.value)
			}
		}
		stop()
		for range ch {
		}
		// Same process: a Campaign and a Proclaim through the observer's store value are
		// delivered at once, without a read (the poll interval is an hour, and no other
		// observer of this store value is left to read more often).
		lm := h.elections(t, watch, h.Farm)
		lctx, lstop := context.WithCancel(ctx)
		slow := h.elections(t, watch, h.Farm, election.WithPollInterval(time.Hour))
		lch, err := slow.Observe(lctx, name+"-local")
		must(t, err, "Observe local")
		ld, err := lm.Campaign(ctx, name+"-local", "here")
		must(t, err, "Campaign local")
		if got := next(t, lch, "local Campaign"); got.Token != ld.Token() || got.Value != "here" {
			t.Fatalf("local observation %+v, want token %d value here", got, ld.Token())
		}
		must(t, ld.Proclaim(ctx, "there"), "Proclaim local")
		if got := next(t, lch, "local Proclaim"); got.Token != ld.Token() || got.Value != "there" {
			t.Fatalf("local observation %+v, want token %d value there", got, ld.Token())
		}
		must(t, ld.Resign(ctx), "Resign")
		lstop()
		for range lch {
		}
	})

	t.Run("ThousandObserversOneReadPair", func(t *testing.T) {
		noLeaks(t)
		ctx := ctxT(t, 2*time.Minute)
		const elections, per = 10, 100
		base := unique(t)
		lm := h.elections(t, newElectionSpy(t, h.open(t)), h.Farm)
		var leaders []*election.Leadership
		for e := 0; e < elections; e++ {
			ld, err := lm.Campaign(ctx, fmt.Sprintf("%s-%d", base, e), fmt.Sprint(e))
			must(t, err, "Campaign")
			leaders = append(leaders, ld)
		}
		watch := newElectionSpy(t, h.open(t))
		om := h.elections(t, watch, h.Farm)
		octx, stop := context.WithCancel(ctx)
		var chans []<-chan election.Leader
		for e := 0; e < elections; e++ {
			for i := 0; i < per; i++ {
				ch, err := om.Observe(octx, fmt.Sprintf("%s-%d", base, e))
				must(t, err, "Observe")
				chans = append(chans, ch)
			}
		}
		for i, ch := range chans {
			if got := next(t, ch, "initial leader"); got.Token != leaders[i/per].Token() {
				t.Fatalf("observer %d saw token %d, want %d", i, got.Token, leaders[i/per].Token())
			}
		}
		r0, l0, start := watch.regReads.Load(), watch.lockReads.Load(), time.Now()
		for watch.regReads.Load() < r0+6 && ctx.Err() == nil {
			time.Sleep(h.PollInterval / 5)
		}
		r1, l1, elapsed := watch.regReads.Load(), watch.lockReads.Load(), time.Since(start)
		passes := r1 - r0
		if d := l1 - l0; d < passes-1 || d > passes+1 {
			t.Fatalf("%d register reads but %d lock reads: want one of each per pass", passes, d)
		}
		if n := watch.singleReads.Load(); n != 0 {
			t.Fatalf("%d single InspectLock calls: the watcher must read the locks in one batch", n)
		}
		if b := watch.maxBatch.Load(); b != elections {
			t.Fatalf("largest register batch %d, want %d (every observed election in one read)", b, elections)
		}
		// At most one pass per interval (only slowness makes fewer).
		if limit := int64(elapsed/h.PollInterval) + 2; passes > limit {
			t.Fatalf("%d passes in %v with a %v interval: more than one per interval", passes, elapsed, h.PollInterval)
		}
		stop()
		for _, ch := range chans {
			for range ch {
			}
		}
		for _, ld := range leaders {
			must(t, ld.Resign(ctx), "Resign")
		}
	})

	t.Run("NeverTwoLeadersAcrossProcesses", func(t *testing.T) {
		if h.ProcessEnv == nil {
			t.Skip("store lives in one process")
		}
		const procs, each = 4, 8
		file := filepath.Join(t.TempDir(), "leaders.log")
		must(t, os.WriteFile(file, nil, 0o644), "create log")
		spawn(t, h, procs, "elect", unique(t), each, file)
		checkExclusiveLog(t, readLines(t, file), 2*procs*each, "leaders")
	})
}

// childElect campaigns for an XDC election env.n times from farm env.farm and, while
// leading (its leadership's context live), appends a start and an end line with its
// token to the file env.arg, then resigns.
func childElect(ctx context.Context, s driver.Store, env childEnv) error {
	m, err := election.New(s, client, env.farm, election.WithLevel(dcsync.XDC), election.WithTTL(time.Minute),
		election.WithBackoff(5*time.Millisecond, 100*time.Millisecond), election.WithLogger(quiet))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(env.arg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for i := 0; i < env.n; i++ {
		ld, err := m.Campaign(ctx, env.name, fmt.Sprintf("%d-%d", os.Getpid(), i))
		if err != nil {
			return err
		}
		lctx := ld.Context()
		if lctx.Err() != nil {
			return context.Cause(lctx)
		}
		if _, err := fmt.Fprintf(f, "start %d %d\n", os.Getpid(), ld.Token()); err != nil {
			return err
		}
		time.Sleep(2 * time.Millisecond)
		if lctx.Err() != nil {
			return fmt.Errorf("leadership ended while leading: %w", context.Cause(lctx))
		}
		if _, err := fmt.Fprintf(f, "end %d %d\n", os.Getpid(), ld.Token()); err != nil {
			return err
		}
		if err := ld.Resign(ctx); err != nil {
			return err
		}
	}
	return nil
}
