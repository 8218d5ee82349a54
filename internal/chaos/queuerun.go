package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// QueueScenario is one run of the queue model: producers and consumers of one queue
// (goroutines, and child processes when StoreURL is set), with faults, then a drain,
// then the check (CheckQueue).
type QueueScenario struct {
	// Open opens the store of the goroutine workers, the set-up and the drain. A store
	// reached through a fault proxy is opened here like any other.
	Open func(ctx context.Context) (driver.Store, error)
	// StoreURL, when set, is what child processes open (with the function given to
	// QueueChildMain in the test binary), and ProcessProducers and ProcessConsumers
	// are started as processes.
	StoreURL string
	// Child is the command that runs QueueChildMain (normally the test binary).
	Child func() *exec.Cmd
	// Name is the queue's name (unique per run).
	Name string

	Partitions int // event partitions (default 8)
	Groups     int // consumer groups, 1 or 2 (default 2)
	// Events: the producers stop once this many events were enqueued (default 2000),
	// or after Duration (default 2 min), whichever comes first.
	Events   int
	Duration time.Duration
	// Goroutine workers: producers, and consumers per group.
	Producers, Consumers int
	// Child processes: producers, and consumers per group.
	ProcessProducers, ProcessConsumers int

	Batch int // events per Enqueue at most, and Receive's maximum (default 16)
	// ProducerPause spaces each producer's Enqueue calls (default 2 ms).
	ProducerPause time.Duration
	Keys          int // distinct keys (default 64)
	NackPercent   int // share of deliveries nacked (default 5)
	PoisonEvery   int // every n-th event is nacked until dead-lettered (default 200; -1: none)
	// Churn makes goroutine consumers leave and rejoin after about this many receives
	// (0: never).
	Churn int

	// Queue options (defaults: lease 2 s, visibility 10 s, 3 attempts, backoff 20 ms to
	// 200 ms, hole timeout 1 s, poll 50 ms).
	Lease, Visibility      time.Duration
	MaxAttempts            int
	MinBackoff, MaxBackoff time.Duration

	// Pause and Kill are the process faults: SIGSTOP a consumer process past its lease
	// then SIGCONT it; SIGKILL a process (producer or consumer) and start another.
	Pause, Kill bool
	// Freeze holds back every store call of a goroutine consumer for longer than its
	// lease (the in-process pause, see queueFreezer).
	Freeze bool
	// Fault, when set, injects a store-level fault (a proxy's) and returns its name.
	Fault      func(r *rand.Rand) string
	FaultEvery time.Duration // default 700 ms
	// Wrap, when set, wraps the store of every goroutine worker (a deliberately
	// broken store, in the checker's own tests).
	Wrap func(driver.Store) driver.Store
	// Drain bounds the drain after the run (default 2 min).
	Drain time.Duration
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// QueueReport is what a queue run did and what the checker found.
type QueueReport struct {
	QueueResult
	Records   int
	Processes int           // child processes started
	Produced  time.Duration // how long the producers ran
	Drain     time.Duration // how long the drain took
	Elapsed   time.Duration // the whole run, drain and check included
	Drained   bool          // the drain saw every event acked by every group
	records   []QueueRecord
}

// dumpQueue writes records to path as JSON lines.
func dumpQueue(path string, records []QueueRecord) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range records {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (r QueueReport) String() string {
	return fmt.Sprintf("records=%d processes=%d faults=%v produced=%v drain=%v elapsed=%v drained=%v\n  queue: %s",
		r.Records, r.Processes, r.Faults, r.Produced.Round(time.Second), r.Drain.Round(time.Second),
		r.Elapsed.Round(time.Second), r.Drained, r.QueueResult)
}

// queueChildConfig is what a child process is told (one JSON environment variable).
type queueChildConfig struct {
	Role        string        `json:"role"` // "producer" or "consumer"
	URL         string        `json:"url"`
	Pause       time.Duration `json:"pause"`
	Queue       string        `json:"queue"`
	Group       string        `json:"group,omitempty"`
	Client      int           `json:"client"`
	Prefix      string        `json:"prefix,omitempty"`
	Keys        int           `json:"keys"`
	Batch       int           `json:"batch"`
	NackPercent int           `json:"nack"`
	PoisonEvery int           `json:"poison"`
	Lease       time.Duration `json:"lease"`
	Visibility  time.Duration `json:"visibility"`
	MaxAttempts int           `json:"attempts"`
	MinBackoff  time.Duration `json:"min_backoff"`
	MaxBackoff  time.Duration `json:"max_backoff"`
}

const envQueueChild = "DCSYNC_QCHAOS_CHILD"

// IsQueueChild reports whether this process was started as a queue chaos worker.
func IsQueueChild() bool { return os.Getenv(envQueueChild) != "" }

// QueueChildMain runs a queue worker as a child process when this process was started
// as one (call it first in the test binary, e.g. from an init function): it opens the
// store URL it was given with open, writes its records to stdout as JSON lines until
// stdin closes or it is signalled, and exits. Otherwise it returns at once.
func QueueChildMain(open func(ctx context.Context, url string) (driver.Store, error)) {
	raw := os.Getenv(envQueueChild)
	if raw == "" {
		return
	}
	var cfg queueChildConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "queue chaos child:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	store, err := open(ctx, cfg.URL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue chaos child:", err)
		os.Exit(1)
	}
	q, err := queue.Open(ctx, store, cfg.Queue, queueOptions(cfg)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue chaos child:", err)
		os.Exit(1)
	}
	out := QueueJSONLines(os.Stdout)
	switch cfg.Role {
	case "producer":
		QueueProducer{Client: cfg.Client, Queue: q, Prefix: cfg.Prefix, Keys: cfg.Keys, Batch: cfg.Batch,
			PoisonEvery: cfg.PoisonEvery, Pause: cfg.Pause, Out: out}.Run(ctx)
	case "consumer":
		QueueConsumer{Client: cfg.Client, Queue: q, Group: cfg.Group, Batch: cfg.Batch, NackPercent: cfg.NackPercent, Out: out}.Run(ctx)
	}
	if c, ok := store.(io.Closer); ok {
		_ = c.Close()
	}
	os.Exit(0)
}

// producerPause spaces a producer's Enqueue calls.
const producerPause = 2 * time.Millisecond

func queueOptions(cfg queueChildConfig) []queue.Option {
	return []queue.Option{
		queue.WithIdentity("chaos", "dc1"),
		queue.WithLease(cfg.Lease),
		queue.WithVisibility(cfg.Visibility),
		queue.WithMaxAttempts(cfg.MaxAttempts),
		queue.WithRetryBackoff(cfg.MinBackoff, cfg.MaxBackoff),
		queue.WithHoleTimeout(time.Second),
		queue.WithPollInterval(50 * time.Millisecond),
		queue.WithLogger(slog.New(slog.DiscardHandler)),
	}
}

func (sc *QueueScenario) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&sc.Partitions, 8)
	def(&sc.Groups, 2)
	def(&sc.Events, 2000)
	def(&sc.Batch, 16)
	def(&sc.Keys, 64)
	def(&sc.NackPercent, 5)
	def(&sc.PoisonEvery, 200)
	def(&sc.MaxAttempts, 3)
	defd(&sc.Duration, 2*time.Minute)
	defd(&sc.ProducerPause, producerPause)
	defd(&sc.Lease, 2*time.Second)
	defd(&sc.Visibility, 10*time.Second)
	defd(&sc.MinBackoff, 20*time.Millisecond)
	defd(&sc.MaxBackoff, 200*time.Millisecond)
	defd(&sc.FaultEvery, 700*time.Millisecond)
	defd(&sc.Drain, 2*time.Minute)
	if sc.PoisonEvery < 0 {
		sc.PoisonEvery = 0
	}
	if sc.NackPercent < 0 {
		sc.NackPercent = 0
	}
	if sc.Logf == nil {
		sc.Logf = func(string, ...any) {}
	}
}

func (sc QueueScenario) groupNames() []string {
	gs := make([]string, sc.Groups)
	for i := range gs {
		gs[i] = "g" + strconv.Itoa(i+1)
	}
	return gs
}

type queueChild struct {
	cfg queueChildConfig
	proc
}

// Run runs the scenario, drains the queue and checks the history.
func (sc QueueScenario) Run(ctx context.Context) (QueueReport, error) {
	sc.defaults()
	start := time.Now()
	var rep QueueReport
	store, err := sc.Open(ctx)
	if err != nil {
		return rep, err
	}
	defer func() {
		if c, ok := store.(io.Closer); ok {
			_ = c.Close()
		}
	}()
	groups := sc.groupNames()
	base := queueChildConfig{URL: sc.StoreURL, Pause: sc.ProducerPause, Queue: sc.Name, Prefix: sc.Name, Keys: sc.Keys, Batch: sc.Batch,
		NackPercent: sc.NackPercent, PoisonEvery: sc.PoisonEvery, Lease: sc.Lease, Visibility: sc.Visibility,
		MaxAttempts: sc.MaxAttempts, MinBackoff: sc.MinBackoff, MaxBackoff: sc.MaxBackoff}
	opts := queueOptions(base)
	wrap := func(s driver.Store) driver.Store {
		if sc.Wrap != nil {
			return sc.Wrap(s)
		}
		return s
	}
	setup, err := queue.Create(ctx, wrap(store), queue.Spec{Name: sc.Name, Partitions: sc.Partitions, Groups: groups}, opts...)
	if err != nil {
		return rep, fmt.Errorf("create the queue: %w", err)
	}

	var log QueueLog
	faults := map[string]int{}
	var mu sync.Mutex
	client := 0
	nextClient := func() int { mu.Lock(); defer mu.Unlock(); client++; return client }
	fault := func(name string) { mu.Lock(); faults[name]++; mu.Unlock() }

	// Dead-letter consumers run from the start to the end of the drain.
	deadCtx, stopDead := context.WithCancel(context.Background())
	defer stopDead()
	var deadWG sync.WaitGroup
	for _, g := range groups {
		w := QueueConsumer{Client: nextClient(), Queue: setup, Group: g, Dead: true, Batch: sc.Batch, Out: log.Add}
		deadWG.Add(1)
		go func() { defer deadWG.Done(); w.Run(deadCtx) }()
	}

	prodCtx, stopProd := context.WithCancel(ctx)
	defer stopProd()
	consCtx, stopCons := context.WithCancel(ctx)
	defer stopCons()
	var prodWG, consWG sync.WaitGroup
	var freezers []*queueFreezer
	for _, g := range groups {
		for i := 0; i < sc.Consumers; i++ {
			f := newQueueFreezer(wrap(store))
			freezers = append(freezers, f)
			q, err := queue.Open(ctx, f, sc.Name, opts...)
			if err != nil {
				return rep, err
			}
			w := QueueConsumer{Client: nextClient(), Queue: q, Group: g, Batch: sc.Batch, NackPercent: sc.NackPercent, Churn: sc.Churn, Out: log.Add}
			consWG.Add(1)
			go func() { defer consWG.Done(); w.Run(consCtx) }()
		}
	}
	for i := 0; i < sc.Producers; i++ {
		w := QueueProducer{Client: nextClient(), Queue: setup, Prefix: sc.Name, Keys: sc.Keys, Batch: sc.Batch,
			PoisonEvery: sc.PoisonEvery, Pause: sc.ProducerPause, Out: log.Add}
		prodWG.Add(1)
		go func() { defer prodWG.Done(); w.Run(prodCtx) }()
	}

	var children []*queueChild
	startChild := func(cfg queueChildConfig) error {
		cfg.Client = nextClient()
		raw, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		cmd := sc.Child()
		cmd.Env = append(os.Environ(), envQueueChild+"="+string(raw))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		c := &queueChild{cfg: cfg, proc: proc{cmd: cmd, stdin: stdin, done: make(chan struct{})}}
		go func() { _ = log.Collect(stdout); _ = cmd.Wait(); close(c.done) }()
		mu.Lock()
		children = append(children, c)
		rep.Processes++
		mu.Unlock()
		return nil
	}
	if sc.StoreURL != "" {
		for i := 0; i < sc.ProcessProducers; i++ {
			cfg := base
			cfg.Role = "producer"
			if err := startChild(cfg); err != nil {
				return rep, err
			}
		}
		for _, g := range groups {
			for i := 0; i < sc.ProcessConsumers; i++ {
				cfg := base
				cfg.Role, cfg.Group = "consumer", g
				if err := startChild(cfg); err != nil {
					return rep, err
				}
			}
		}
	}
	live := func(role string) []*queueChild {
		mu.Lock()
		defer mu.Unlock()
		var out []*queueChild
		for _, c := range children {
			select {
			case <-c.done:
			default:
				if role == "" || c.cfg.Role == role {
					out = append(out, c)
				}
			}
		}
		return out
	}

	// Faults, until the consumers stop.
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	producing := true
	var faultWG sync.WaitGroup
	faultWG.Add(1)
	go func() {
		defer faultWG.Done()
		injectFaults(faultCtx, 11, sc.FaultEvery, sc.Fault, func() []injectFault {
			var options []injectFault
			consumers := live("consumer")
			if sc.Pause && len(consumers) > 0 {
				options = append(options, func(r *rand.Rand) string {
					consumers[r.IntN(len(consumers))].pause(pauseLength(r, sc.Lease))
					return "pause"
				})
			}
			mu.Lock()
			stillProducing := producing
			mu.Unlock()
			if sc.Kill && (len(consumers) > 0 || stillProducing && len(live("producer")) > 0) {
				options = append(options, func(r *rand.Rand) string {
					cand := consumers
					if stillProducing {
						cand = append(cand, live("producer")...)
					}
					if len(cand) == 0 {
						return ""
					}
					c := cand[r.IntN(len(cand))]
					c.kill()
					mu.Lock()
					restart := c.cfg.Role == "consumer" || producing
					mu.Unlock()
					if faultCtx.Err() == nil && restart {
						_ = startChild(c.cfg)
					}
					return "kill-" + c.cfg.Role
				})
			}
			if sc.Freeze && len(freezers) > 0 {
				options = append(options, func(r *rand.Rand) string {
					freezers[r.IntN(len(freezers))].freeze(pauseLength(r, sc.Lease))
					return "freeze"
				})
			}
			return options
		}, fault)
	}()

	// Production: until Events were enqueued or Duration passed.
	deadline := time.Now().Add(sc.Duration)
	for time.Now().Before(deadline) && ctx.Err() == nil && enqueuedCount(&log) < sc.Events {
		sleep(ctx, 200*time.Millisecond)
	}
	mu.Lock()
	producing = false
	mu.Unlock()
	stopProd()
	for _, c := range live("producer") {
		_ = c.stdin.Close()
	}
	prodWG.Wait()
	rep.Produced = time.Since(start)
	sc.Logf("queue chaos %s: production over after %v, %d records", sc.Name, time.Since(start).Round(time.Second), log.Len())

	// The consumers go on, under faults, until they have caught up (or for at most 20 s).
	progress := newQueueProgress(sc.Partitions, groups)
	tail := time.Now().Add(20 * time.Second)
	for time.Now().Before(tail) && ctx.Err() == nil {
		n := progress.pending(&log, false)
		if n == 0 {
			break
		}
		sc.Logf("queue chaos %s: %d acks still due", sc.Name, n)
		sleep(ctx, 2*time.Second)
	}
	stopFaults()
	faultWG.Wait()
	stopCons()
	all := live("")
	stopProcs(all)
	consWG.Wait()
	sc.Logf("queue chaos %s: workers stopped after %v", sc.Name, time.Since(start).Round(time.Second))

	// Resolve: every id whose enqueue outcome stayed unknown is enqueued again with the
	// same id until the store answers (a duplicate names where it is).
	if err := resolveUnknown(ctx, setup, &log, nextClient()); err != nil {
		return rep, err
	}

	// Drain: fresh consumers that ack everything, until every event is acked by every
	// group (or the drain's time is up: what is left is reported as not acked).
	drainCtx, stopDrain := context.WithCancel(ctx)
	var drainWG sync.WaitGroup
	for _, g := range groups {
		w := QueueConsumer{Client: nextClient(), Queue: setup, Group: g, Batch: 256, Out: log.Add}
		drainWG.Add(1)
		go func() { defer drainWG.Done(); w.Run(drainCtx) }()
	}
	drainStart := time.Now()
	drainEnd := drainStart.Add(sc.Drain)
	lastLog := time.Now()
	for time.Now().Before(drainEnd) && ctx.Err() == nil {
		n := progress.pending(&log, true)
		if n == 0 {
			rep.Drained = true
			break
		}
		if time.Since(lastLog) > 5*time.Second {
			sc.Logf("queue chaos %s: draining, %d acks still due", sc.Name, n)
			lastLog = time.Now()
		}
		sleep(ctx, 500*time.Millisecond)
	}
	rep.Drain = time.Since(drainStart)
	stopDrain()
	drainWG.Wait()
	stopDead()
	deadWG.Wait()

	records := log.Records()
	rep.Records = len(records)
	rep.QueueResult = CheckQueue(records, sc.Partitions, groups)
	rep.records = records
	for k, v := range faults {
		rep.Faults[k] += v
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// enqueuedCount counts the events enqueued so far (returned, not duplicates).
func enqueuedCount(l *QueueLog) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records[l.counted:] {
		if r.Kind == QueueKindEnqueue && r.Phase == PhaseReturn && r.Outcome == OK && !r.Duplicate {
			l.enqueued++
		}
	}
	l.counted = len(l.records)
	return l.enqueued
}

// resolveUnknown enqueues again, with their ids and keys, the events whose every
// Enqueue failed or never returned, until each gets an answer.
func resolveUnknown(ctx context.Context, q *queue.Queue, l *QueueLog, client int) error {
	records := l.Records()
	key := map[string]string{}
	payload := map[string][]byte{}
	done := map[string]bool{}
	var order []string
	for _, r := range records {
		if r.Kind != QueueKindEnqueue {
			continue
		}
		if r.Phase == PhaseCall {
			if _, ok := key[r.ID]; !ok {
				order = append(order, r.ID)
			}
			key[r.ID] = r.Key
			payload[r.ID] = []byte("event")
		} else if r.Outcome == OK {
			done[r.ID] = true
		}
	}
	op := 0
	for _, id := range order {
		if done[id] {
			continue
		}
		e := queue.Event{ID: id, Key: key[id], Payload: payload[id]}
		var err error
		for try := 0; try < 20; try++ {
			op++
			l.Add(QueueRecord{Client: client, Op: op, Phase: PhaseCall, Kind: QueueKindEnqueue, ID: id, Key: e.Key, At: now()})
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			var res []driver.QueueAppend
			res, err = q.Enqueue(cctx, e)
			cancel()
			rec := QueueRecord{Client: client, Op: op, Phase: PhaseReturn, Kind: QueueKindEnqueue, ID: id, Key: e.Key, Outcome: outcomeOf(err), At: now()}
			if err == nil {
				rec.Partition, rec.Seq, rec.Duplicate = res[0].Partition, res[0].Seq, res[0].Duplicate
			}
			l.Add(rec)
			if err == nil || ctx.Err() != nil {
				break
			}
			sleep(ctx, 200*time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("resolving the enqueue of %q: %w", id, err)
		}
	}
	return nil
}

var errNoWork = errors.New("the run checked no events")

// RunQueueT runs sc in a test: it fills in what sc leaves out (a unique name, the
// test binary as the child, t.Logf for progress), logs the report (the figures of
// docs/reliability.md), and fails t on a violation, on a run that did not drain, or
// on one that checked fewer than minEvents events. DCSYNC_QCHAOS_NO_NACKS=1 turns
// nacks and poison events off (to tell the consumer's out-of-order acks and dead
// letters apart from other causes of a violation).
func RunQueueT(t testing.TB, sc QueueScenario, minEvents int) QueueReport {
	t.Helper()
	if sc.Name == "" {
		sc.Name = fmt.Sprintf("qchaos-%d", time.Now().UnixNano())
	}
	if sc.Child == nil {
		sc.Child = func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }
	}
	if sc.Logf == nil {
		sc.Logf = t.Logf
	}
	if os.Getenv("DCSYNC_QCHAOS_NO_NACKS") == "1" {
		// No Nack and no poison event: the consumer never acks out of order and
		// dead-letters only what deaths and pauses push over the attempt limit.
		sc.NackPercent, sc.PoisonEvery = -1, -1
	}
	rep, err := sc.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("queue chaos %s: %v", t.Name(), rep)
	if dir := os.Getenv("DCSYNC_CHAOS_DUMP"); dir != "" && (!rep.OK() || rep.Unresolved > 0) {
		path := filepath.Join(dir, sc.Name+".jsonl")
		if err := dumpQueue(path, rep.records); err != nil {
			t.Logf("writing the history: %v", err)
		} else {
			t.Logf("history written to %s", path)
		}
	}
	if !rep.OK() {
		t.Fatalf("%d violation(s):\n%v", rep.Total(), rep)
	}
	if rep.Unresolved > 0 {
		t.Fatalf("%d enqueues stayed unresolved:\n%v", rep.Unresolved, rep)
	}
	if rep.Events == 0 {
		t.Fatal(errNoWork)
	}
	if rep.Events < minEvents {
		t.Fatalf("the run checked %d events, fewer than %d:\n%v", rep.Events, minEvents, rep)
	}
	return rep
}

// SoakDuration returns the soak duration set by DCSYNC_SOAK (a Go duration, e.g.
// "10m"), or 0 when it is unset or invalid.
func SoakDuration() time.Duration {
	d, err := time.ParseDuration(os.Getenv("DCSYNC_SOAK"))
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// QueueCIEvents is how many events a CI run checks per store, at least.
const QueueCIEvents = 20000

// soakRate is the events per second a soak's producers aim at, all together: the
// history of a 10-minute soak stays within a few hundred MB.
const soakRate = 150

// Soak turns sc into a soak run when DCSYNC_SOAK is set (see SoakDuration): producers
// run for that long with no bound on the events, paced to about soakRate events a
// second. It reports whether it did.
func (sc *QueueScenario) Soak() bool {
	d := SoakDuration()
	if d == 0 {
		return false
	}
	sc.Events, sc.Duration = 1<<40, d
	producers := max(sc.Producers+sc.ProcessProducers, 1)
	batch := max(sc.Batch, 16)
	sc.ProducerPause = time.Duration(float64(batch/2+1) * float64(producers) / soakRate * float64(time.Second))
	return true
}
