package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

func newDemoCmd(a *app) *cobra.Command {
	var workers, rounds, events int
	demo := &cobra.Command{
		Use:   "demo",
		Short: "Run worker processes that share a lock, a latch and a queue, and check the result",
		Long: `demo starts worker processes (copies of this program). Each takes one lock
several times, printing its fencing token and when it took and left the lock, then
counts down one latch; this process awaits the latch and then checks, from those
timestamps, that no two workers held the lock at once and that tokens strictly
increased.

Meanwhile this process enqueues --events keyed events on a queue of 8 partitions, and
the workers, as one consumer group, receive and ack them (partitions move between them
as they join). The demo checks from their reports that every event was acked exactly
once, and each key's events in order.

Without --store (and DCSYNC_STORE) the demo works in a temporary SQLite file, removed
afterwards: it never writes into your default store. With --store it uses that store
(any but memory:, which the worker processes could not share).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if a.client == "" {
				a.client = "demo"
			}
			if strings.HasPrefix(strings.ToLower(a.storeURL), "memory:") {
				return withCode(exitUsage, errors.New("demo runs worker processes, which cannot share a memory: store "+
					"(it lives inside one process): use a sqlite://, hbase:// or aerospike:// store, or no --store for a temporary SQLite file"))
			}
			if !c.Flag("store").Changed && os.Getenv("DCSYNC_STORE") == "" {
				dir, err := os.MkdirTemp("", "dcsync-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				a.storeURL = "sqlite://" + filepath.Join(dir, "demo.db")
			}
			return a.demo(c.Context(), workers, rounds, events)
		},
	}
	demo.Flags().IntVar(&workers, "workers", 4, "worker processes")
	demo.Flags().IntVar(&rounds, "rounds", 5, "lock acquisitions per worker")
	demo.Flags().IntVar(&events, "events", 400, "events enqueued for the workers")

	worker := &cobra.Command{
		Use:    "demo-worker NAME ROUNDS",
		Hidden: true,
		Args:   cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return withCode(exitUsage, err)
			}
			return a.demoWorker(c.Context(), args[0], n)
		},
	}
	demo.AddCommand(worker)
	return demo
}

func (a *app) demo(ctx context.Context, workers, rounds, events int) error {
	if workers < 1 || rounds < 1 || events < 1 {
		return withCode(exitUsage, fmt.Errorf("--workers, --rounds and --events must be at least 1"))
	}
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer a.close() // before the temporary store's directory is removed
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "demo-" + hex.EncodeToString(b[:])
	lm, err := latch.New(s, a.client, a.farm, latch.WithPollInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	l, err := lm.CreateCountDown(ctx, name, int64(workers), latch.TTL(10*time.Minute))
	if err != nil {
		return err
	}
	q, done, err := a.demoCreateQueue(ctx, s, lm, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "store %s, client %s, farm %s\n", a.storeURL, a.client, a.farm)
	fmt.Fprintf(a.stdout, "latch %q created with count %d; queue %q with %d partitions; starting %d worker processes\n",
		name, workers, name, demoPartitions, workers)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The wait for the latch ends early when a worker fails: it will never count down.
	wctx, cancel := context.WithTimeoutCause(ctx, 5*time.Minute, errors.New("the workers did not finish within 5 minutes"))
	defer cancel()
	var (
		mu    sync.Mutex
		lines []string
		wg    sync.WaitGroup
		errs  = make(chan error, workers)
	)
	for i := 0; i < workers; i++ {
		// wctx: a failed demo stops its workers (they would otherwise wait for the done
		// latch until it expires).
		cmd := exec.CommandContext(wctx, self, "--store", a.storeURL, "--client", a.client, "--farm", a.farm,
			"demo", "demo-worker", name, strconv.Itoa(rounds))
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		cmd.Stderr = a.stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				mu.Lock()
				lines = append(lines, sc.Text())
				fmt.Fprintln(a.stdout, "  "+sc.Text())
				mu.Unlock()
			}
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("worker %d: %w", cmd.Process.Pid, err)
				cancel()
			}
		}()
	}
	produced := make(chan error, 1)
	go func() { produced <- a.demoProduce(wctx, q, done, events) }()
	waitErr := l.Wait(wctx)
	prodErr := <-produced
	if prodErr != nil {
		cancel()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	if waitErr != nil {
		if c := context.Cause(wctx); c != nil && !errors.Is(c, context.Canceled) {
			return fmt.Errorf("await latch %q: %w", name, c)
		}
		return waitErr
	}
	if prodErr != nil {
		return fmt.Errorf("queue %q: %w", name, prodErr)
	}
	fmt.Fprintf(a.stdout, "latch %q reached zero: every worker counted down\n", name)

	var hs []holding
	var acked []ackedEvent
	for _, line := range lines {
		var h holding
		if _, err := fmt.Sscanf(line, "pid=%d token=%d held from=%d to=%d", &h.pid, &h.token, &h.start, &h.end); err == nil {
			hs = append(hs, h)
		} else if e, ok := parseAcked(line); ok {
			acked = append(acked, e)
		}
	}
	if len(hs) != workers*rounds {
		return fmt.Errorf("demo failed: %d acquisitions reported, want %d", len(hs), workers*rounds)
	}
	if err := checkHoldings(hs); err != nil {
		return fmt.Errorf("demo failed: %w", err)
	}
	fmt.Fprintf(a.stdout, "%d acquisitions by %d processes, one holder at a time (by their timestamps), tokens strictly increasing (%d..%d)\n",
		len(hs), workers, hs[0].token, hs[len(hs)-1].token)
	consumers, err := checkAcked(acked, events)
	if err != nil {
		return fmt.Errorf("demo failed: queue %q: %w", name, err)
	}
	moved := ""
	if consumers > 1 {
		moved = " (partitions moved between them)"
	}
	fmt.Fprintf(a.stdout, "%d events acked exactly once by %d of %d worker processes%s, each key's events in order\n",
		events, consumers, workers, moved)
	return nil
}

// holding is one acquisition a demo worker reports: from when Acquire returned to just
// before Release was sent, by the wall clock of this host (all workers run on it).
type holding struct {
	pid        int
	token      uint64
	start, end int64 // Unix ns
}

// checkHoldings checks what the demo claims: ordered by start, every holding ends before
// the next one starts (no two holders at once), and tokens strictly increase. It sorts
// hs.
func checkHoldings(hs []holding) error {
	sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
	for i := 1; i < len(hs); i++ {
		p, h := hs[i-1], hs[i]
		if h.start <= p.end {
			return fmt.Errorf("two holders at once: pid %d (token %d) held the lock from %d to %d (Unix ns), pid %d (token %d) from %d",
				p.pid, p.token, p.start, p.end, h.pid, h.token, h.start)
		}
		if h.token <= p.token {
			return fmt.Errorf("token %d (pid %d) was taken after token %d (pid %d): tokens did not strictly increase",
				h.token, h.pid, p.token, p.pid)
		}
	}
	return nil
}

// demoWorker takes the lock rounds times, printing its token and the times it held it,
// then counts the latch down once.
func (a *app) demoWorker(ctx context.Context, name string, rounds int) error {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	// Fair mode: a worker that releases yields to the others instead of taking every
	// turn in a row (see "Fairness" in package lock).
	lk, err := lock.New(s, a.client, a.farm, lock.WithBackoff(5*time.Millisecond, 200*time.Millisecond), lock.WithFairness(true))
	if err != nil {
		return err
	}
	for i := 0; i < rounds; i++ {
		l, err := lk.Acquire(ctx, name, lock.TTL(30*time.Second), lock.Wait(time.Minute))
		if err != nil {
			return err
		}
		start := time.Now().UnixNano()
		time.Sleep(20 * time.Millisecond)
		end := time.Now().UnixNano()
		fmt.Fprintf(a.stdout, "pid=%d token=%d held from=%d to=%d\n", os.Getpid(), l.Token(), start, end)
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	lm, err := latch.New(s, a.client, a.farm)
	if err != nil {
		return err
	}
	l, err := lm.GetCountDown(name)
	if err != nil {
		return err
	}
	if _, err = l.CountDown(ctx); err != nil {
		return err
	}
	return a.demoConsume(ctx, s, name)
}
