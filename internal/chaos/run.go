package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

// Scenario is one run: workers on one lock and one latch of one store, with faults.
type Scenario struct {
	// Open opens the store for the goroutine workers (and the set-up and final read).
	Open func(ctx context.Context) (driver.Store, error)
	// StoreURL, when set, is what child processes open (storeurl); Processes of each
	// kind are started.
	StoreURL  string
	Goroutine int // lock workers and latch workers in this process (each)
	Processes int // lock workers and latch workers as child processes (each)
	Duration  time.Duration
	TTL       time.Duration // lock lease (>= 1 s)
	// Locks is how many locks the lock workers share (DefaultLocks if 0). Each lock
	// worker runs several holders (goroutines), a sixteenth more holders than locks in
	// all: a holder takes its lock again after each hold, so most locks are held most
	// of the time, and the spare holders keep trying locks at random, so a lease that
	// ends early lets one of them in. Each lock is held about once per TTL, so a run
	// checks about 2*Locks*Duration/TTL lock operations.
	Locks int
	// MinLockOps, when set, makes the run go on past Duration until the lock workers
	// have made MinLockOps/2 acquisitions (so about MinLockOps lock operations are
	// checked), for at most MaxDuration (3*Duration if 0): a loaded machine makes fewer
	// acquisitions per second, and the volume a run checks should not depend on it.
	MinLockOps  int
	MaxDuration time.Duration
	Level       dcsync.Level // the latch's level
	// Pause and Kill enable the process faults: SIGSTOP a child past the lease then
	// SIGCONT it; SIGKILL a child and start another.
	Pause, Kill bool
	// Fault, when set, is called about every FaultEvery with a random source; it
	// injects a store-level fault (a dropped reply, a restart) and returns its name.
	Fault      func(r *rand.Rand) string
	FaultEvery time.Duration
	// Settle, when set, is called once every worker has stopped, before the final
	// read: the fault source cancels what it armed and has not happened yet (a proxy's
	// pending dropped replies and holds would otherwise fall on the final read's
	// traffic, the client's own cluster tending included, for as long as they last).
	Settle func()
	// Primitives adds, in each goroutine worker and as child processes of their own
	// (Processes of them), a PrimitiveWorker on one election, one semaphore and one
	// read-write lock, checked by CheckPrimitives. The run goes on past Duration (up
	// to MaxDuration) until each of the three has been held once.
	Primitives bool
	// Name prefixes the lock and latch names (unique per run).
	Name string
	// Child is the command that runs ChildMain (normally the test binary itself).
	Child func() *exec.Cmd
}

// Report is what a run did and what the checker found.
type Report struct {
	Acquisitions   int
	LatchOps       int
	Faults         map[string]int
	Lock           LockResult
	Latch          Result
	Records        int
	FinalCount     int64
	InitialCount   int64
	ProcessesStart int
	Ran            time.Duration // how long the workers ran (Duration, or more for MinLockOps)
	// Primitives is what the checks of the primitives found (nil unless
	// Scenario.Primitives).
	Primitives *PrimitivesReport
	// FailedLock is the history of the lock the checker found not linearizable,
	// in time order (nil if none).
	FailedLock []Record
}

// Violations is the number of histories that are not linearizable, or checks of the
// primitives that failed (0 to 6).
func (r Report) Violations() int {
	n := 0
	if !r.Lock.OK {
		n++
	}
	if !r.Latch.OK {
		n++
	}
	if r.Primitives != nil {
		n += r.Primitives.Violations()
	}
	return n
}

func (r Report) String() string {
	if r.Primitives != nil {
		return r.lockLatchString() + "\n" + r.Primitives.String()
	}
	return r.lockLatchString()
}

func (r Report) lockLatchString() string {
	return fmt.Sprintf("ran=%v acquisitions=%d latch_ops=%d records=%d faults=%v processes=%d\n  lock:  %s\n  latch: %s (count %d -> %d)",
		r.Ran.Round(100*time.Millisecond), r.Acquisitions, r.LatchOps, r.Records, r.Faults, r.ProcessesStart, r.Lock, r.Latch, r.InitialCount, r.FinalCount)
}

const initialCount = 1000

// latchPause spaces a latch worker's operations.
const latchPause = 5 * time.Millisecond

// Runs whose faults stall most calls (a fault proxy, a store's fault layer) are about
// the faults, not the volume, but a run that made no lock operation proves nothing: on
// a loaded machine, where every call is slow and many time out, such a run goes on
// past its Duration until FaultMinLockOps lock operations were checked, for at most
// FaultMaxDuration (a CI run under load made none in 10 s).
const (
	FaultMinLockOps  = 20
	FaultMaxDuration = 3 * time.Minute
)

// DefaultLocks is how many locks a run's lock workers share unless Scenario.Locks says:
// with the default 10 s and a 1 s lease, about 2 400 lock operations checked per run.
const DefaultLocks = 128

// Lock holders' timing: claims every lockSlice, and at most lockRetry between tries.
const (
	lockSlice = 15 * time.Millisecond
	lockRetry = 100 * time.Millisecond
)

// Environment of a child process.
const (
	envChild  = "DCSYNC_CHAOS_CHILD" // "lock" or "latch"
	envURL    = "DCSYNC_CHAOS_URL"
	envName   = "DCSYNC_CHAOS_NAME"
	envClient = "DCSYNC_CHAOS_CLIENT"
	envTTL    = "DCSYNC_CHAOS_TTL"
	envLevel  = "DCSYNC_CHAOS_LEVEL"
	envLocks  = "DCSYNC_CHAOS_LOCKS"   // lock child: how many locks
	envHolds  = "DCSYNC_CHAOS_HOLDERS" // lock child: how many holders (client ids from envClient on)
)

// lockNames returns the names of a run's n locks.
func lockNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = prefix + "-" + strconv.Itoa(i)
	}
	return names
}

// runHolders runs n lock holders with client ids first, first+1, ... on m until ctx
// ends, and returns their acquisitions.
func runHolders(ctx context.Context, first, n int, m *lock.Manager, names []string, ttl time.Duration, out Sink) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := 0; i < n; i++ {
		w := LockWorker{Client: first + i, Locks: m, Names: names, TTL: ttl, Slice: lockSlice, Retry: lockRetry, KeepAlive: true, Out: out}
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := w.Run(ctx)
			mu.Lock()
			total += k
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total
}

// IsChild reports whether this process was started as a chaos worker.
func IsChild() bool { return os.Getenv(envChild) != "" }

// ChildMain runs a worker as a child process: it opens the store URL it was given with
// open (normally storeurl.Open), writes its records to stdout until stdin closes or it is
// signalled, and exits.
func ChildMain(open func(ctx context.Context, url string) (driver.Store, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	store, err := open(ctx, os.Getenv(envURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos child:", err)
		os.Exit(1)
	}
	defer store.Close()
	client, _ := strconv.Atoi(os.Getenv(envClient))
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	locks, _ := strconv.Atoi(os.Getenv(envLocks))
	holders, _ := strconv.Atoi(os.Getenv(envHolds))
	level, _ := dcsync.ParseLevel(os.Getenv(envLevel))
	out := JSONLines(os.Stdout)
	farm := "dc" + strconv.Itoa(client%2+1)
	quiet := slog.New(slog.DiscardHandler)
	switch os.Getenv(envChild) {
	case "lock":
		m, err := lock.New(store, "chaos", "dc1", lock.WithLogger(quiet))
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos child:", err)
			os.Exit(1)
		}
		runHolders(ctx, client, holders, m, lockNames(os.Getenv(envName), locks), ttl, out)
	case "latch":
		m, err := latch.New(store, "chaos", farm, latch.WithLogger(quiet))
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos child:", err)
			os.Exit(1)
		}
		LatchWorker{Client: client, Latches: m, Name: os.Getenv(envName), Level: level, Out: out, Pause: latchPause}.Run(ctx)
	case "prim":
		PrimitiveWorker{First: client, Store: store, Names: primitiveNames(os.Getenv(envName)), TTL: ttl, Out: out}.Run(ctx)
	}
	os.Exit(0)
}

type child struct {
	kind string
	proc
}

// Run runs the scenario and checks its history.
func (sc Scenario) Run(ctx context.Context) (Report, error) {
	rep := Report{Faults: map[string]int{}, InitialCount: initialCount}
	store, err := sc.Open(ctx)
	if err != nil {
		return rep, err
	}
	defer store.Close()
	quiet := slog.New(slog.DiscardHandler)
	lockName, latchName := sc.Name+"-lock", sc.Name+"-latch"
	if sc.Locks == 0 {
		sc.Locks = DefaultLocks
	}
	locks := lockNames(lockName, sc.Locks)
	// Holders per lock worker: a sixteenth more holders than locks in all.
	holders := max((sc.Locks*17/16+sc.Goroutine+sc.Processes-1)/max(sc.Goroutine+sc.Processes, 1), 2)
	setup, err := latch.New(store, "chaos", "dc1", latch.WithLogger(quiet), latch.WithTTL(time.Hour))
	if err != nil {
		return rep, err
	}
	if _, err := setup.CreateCountUpDown(ctx, latchName, initialCount, latch.Level(sc.Level)); err != nil {
		return rep, fmt.Errorf("create the latch: %w", err)
	}

	var log Log
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	started := time.Now()
	go func() {
		// The run ends after Duration, or later (up to MaxDuration) while too few
		// acquisitions were made for MinLockOps, or (Primitives) one of the
		// primitives was never held.
		maxDur := sc.MaxDuration
		if maxDur == 0 {
			maxDur = 3 * sc.Duration
		}
		start := time.Now()
		if !sleep(runCtx, sc.Duration) {
			return
		}
		for (2*log.Holds() < sc.MinLockOps || sc.Primitives && !log.primitivesHeld()) && time.Since(start) < maxDur && sleep(runCtx, 250*time.Millisecond) {
		}
		stop()
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	client := 0
	nextClients := func(n int) int { mu.Lock(); defer mu.Unlock(); first := client + 1; client += n; return first }
	nextClient := func() int { return nextClients(1) }

	for i := 0; i < sc.Goroutine; i++ {
		lm, err := lock.New(store, "chaos", "dc1", lock.WithLogger(quiet))
		if err != nil {
			return rep, err
		}
		farm := "dc" + strconv.Itoa(i%2+1)
		tm, err := latch.New(store, "chaos", farm, latch.WithLogger(quiet))
		if err != nil {
			return rep, err
		}
		first := nextClients(holders)
		tw := LatchWorker{Client: nextClient(), Latches: tm, Name: latchName, Level: sc.Level, Out: log.Add, Pause: latchPause}
		wg.Add(2)
		go func() { defer wg.Done(); runHolders(runCtx, first, holders, lm, locks, sc.TTL, log.Add) }()
		go func() { defer wg.Done(); tw.Run(runCtx) }()
		if sc.Primitives {
			pw := PrimitiveWorker{First: nextClients(primitiveClients), Store: store, Names: primitiveNames(sc.Name), TTL: sc.TTL, Out: log.Add}
			wg.Add(1)
			go func() { defer wg.Done(); pw.Run(runCtx) }()
		}
	}

	var children []*child
	start := func(kind string) (*child, error) {
		cmd := sc.Child()
		ids := 1
		switch kind {
		case "lock":
			ids = holders
		case "prim":
			ids = primitiveClients
		}
		cmd.Env = append(os.Environ(), envChild+"="+kind, envURL+"="+sc.StoreURL, envClient+"="+strconv.Itoa(nextClients(ids)),
			envTTL+"="+sc.TTL.String(), envLevel+"="+sc.Level.String(),
			envLocks+"="+strconv.Itoa(sc.Locks), envHolds+"="+strconv.Itoa(holders))
		name := lockName
		switch kind {
		case "latch":
			name = latchName
		case "prim":
			name = sc.Name
		}
		cmd.Env = append(cmd.Env, envName+"="+name)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		c := &child{kind: kind, proc: proc{cmd: cmd, stdin: stdin, done: make(chan struct{})}}
		go func() { _ = log.Collect(stdout); _ = cmd.Wait(); close(c.done) }()
		mu.Lock()
		children = append(children, c)
		rep.ProcessesStart++
		mu.Unlock()
		return c, nil
	}
	if sc.StoreURL != "" {
		for i := 0; i < sc.Processes; i++ {
			kinds := []string{"lock", "latch"}
			if sc.Primitives {
				kinds = append(kinds, "prim")
			}
			for _, kind := range kinds {
				if _, err := start(kind); err != nil {
					return rep, err
				}
			}
		}
	}

	// Faults, until the run ends.
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := sc.FaultEvery
		if every == 0 {
			every = 700 * time.Millisecond
		}
		injectFaults(runCtx, 7, every, sc.Fault, func() []injectFault {
			mu.Lock()
			live := []*child{}
			for _, c := range children {
				select {
				case <-c.done:
				default:
					live = append(live, c)
				}
			}
			mu.Unlock()
			var options []injectFault
			if sc.Pause && len(live) > 0 {
				options = append(options, func(r *rand.Rand) string {
					live[r.IntN(len(live))].pause(pauseLength(r, sc.TTL))
					return "pause"
				})
			}
			if sc.Kill && len(live) > 0 {
				options = append(options, func(r *rand.Rand) string {
					c := live[r.IntN(len(live))]
					c.kill()
					if runCtx.Err() == nil {
						_, _ = start(c.kind)
					}
					return "kill"
				})
			}
			return options
		}, func(name string) { mu.Lock(); rep.Faults[name]++; mu.Unlock() })
	}()

	<-runCtx.Done()
	rep.Ran = time.Since(started)
	mu.Lock()
	all := append([]*child(nil), children...)
	mu.Unlock()
	wg.Wait()
	stopProcs(all)

	if sc.Settle != nil {
		sc.Settle()
	}
	// A final read, after every worker has stopped, closes the latch history.
	fin, err := setup.GetCountUpDown(latchName, latch.Level(sc.Level))
	if err != nil {
		return rep, err
	}
	// Faults injected just before the workers stopped (a held request, a reset, a
	// restart) may still be settling: a failed read changes nothing, so it is tried
	// again (for up to a minute) and only the read that returned is recorded.
	seq := 1
	var call int64
	var n int64
	for try := 0; ; try++ {
		call = now()
		if n, err = fin.Count(ctx); err == nil {
			break
		}
		if try == 30 || ctx.Err() != nil {
			return rep, fmt.Errorf("final read (%d tries): %w", try+1, err)
		}
		time.Sleep(2 * time.Second)
	}
	rep.FinalCount = n
	log.Add(Record{Client: 0, Seq: seq, Phase: PhaseCall, Kind: KindRead, At: call})
	log.Add(Record{Client: 0, Seq: seq, Phase: PhaseReturn, Kind: KindRead, Value: n, Outcome: OK, At: now()})

	records := log.Records()
	rep.Records = len(records)
	for _, r := range records {
		if r.Kind == KindEnter && r.Phase == PhaseReturn && r.Outcome == OK {
			rep.Acquisitions++
		}
		if r.Client != 0 && (r.Kind == KindAdd || r.Kind == KindRead) && r.Phase == PhaseCall {
			rep.LatchOps++
		}
	}
	rep.Lock = CheckLock(records, time.Minute)
	if rep.Lock.Failed >= 0 {
		for _, r := range records {
			if r.Lock == rep.Lock.Failed && (r.Kind == KindEnter || r.Kind == KindExit || r.Kind == KindClaim) {
				rep.FailedLock = append(rep.FailedLock, r)
			}
		}
		sort.SliceStable(rep.FailedLock, func(i, j int) bool { return rep.FailedLock[i].At < rep.FailedLock[j].At })
	}
	rep.Latch = CheckLatch(records, initialCount, time.Minute)
	if sc.Primitives {
		p := CheckPrimitives(records, time.Minute)
		rep.Primitives = &p
	}
	return rep, nil
}
