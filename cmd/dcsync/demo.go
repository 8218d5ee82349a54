package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

func newDemoCmd(a *app) *cobra.Command {
	var workers, rounds int
	demo := &cobra.Command{
		Use:   "demo",
		Short: "Run worker processes that share a lock and a latch, and check the result",
		Long: `demo starts worker processes (copies of this program). Each takes one lock
several times, printing its fencing token while it holds it, then counts down one
latch; this process awaits the latch and then checks that every acquisition was
exclusive and that tokens strictly increased. It uses --store like every command.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if a.client == "" {
				a.client = "demo"
			}
			return a.demo(c.Context(), workers, rounds)
		},
	}
	demo.Flags().IntVar(&workers, "workers", 4, "worker processes")
	demo.Flags().IntVar(&rounds, "rounds", 5, "lock acquisitions per worker")

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

func (a *app) demo(ctx context.Context, workers, rounds int) error {
	if workers < 1 || rounds < 1 {
		return withCode(exitUsage, fmt.Errorf("--workers and --rounds must be at least 1"))
	}
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
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
	fmt.Fprintf(a.stdout, "store %s, client %s, farm %s\n", a.storeURL, a.client, a.farm)
	fmt.Fprintf(a.stdout, "latch %q created with count %d; starting %d worker processes\n", name, workers, workers)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		lines []string
		wg    sync.WaitGroup
		errs  = make(chan error, workers)
	)
	for i := 0; i < workers; i++ {
		cmd := exec.CommandContext(ctx, self, "--store", a.storeURL, "--client", a.client, "--farm", a.farm,
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
			}
		}()
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	waitErr := l.Wait(wctx)
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	if waitErr != nil {
		return waitErr
	}
	fmt.Fprintf(a.stdout, "latch %q reached zero: every worker counted down\n", name)

	// Lines are "pid=P token=T held"; sorted by token they must be the order of
	// acquisition, and no two may share a token.
	var tokens []uint64
	for _, line := range lines {
		var pid int
		var tok uint64
		if _, err := fmt.Sscanf(line, "pid=%d token=%d", &pid, &tok); err == nil {
			tokens = append(tokens, tok)
		}
	}
	sorted := sort.SliceIsSorted(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			sorted = false
		}
	}
	if len(tokens) != workers*rounds || !sorted {
		return fmt.Errorf("demo failed: %d acquisitions (want %d), tokens in acquisition order strictly increasing: %v",
			len(tokens), workers*rounds, sorted)
	}
	fmt.Fprintf(a.stdout, "%d acquisitions by %d processes, one holder at a time, tokens strictly increasing (%d..%d)\n",
		len(tokens), workers, tokens[0], tokens[len(tokens)-1])
	return nil
}

// demoWorker takes the lock rounds times, printing its token while it holds it, then
// counts the latch down once.
func (a *app) demoWorker(ctx context.Context, name string, rounds int) error {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	lk, err := lock.New(s, a.client, a.farm, lock.WithBackoff(5*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		return err
	}
	for i := 0; i < rounds; i++ {
		l, err := lk.Acquire(ctx, name, lock.TTL(30*time.Second), lock.Wait(time.Minute))
		if err != nil {
			return err
		}
		// Printed while holding the lock, so the parent sees lines in acquisition order.
		fmt.Fprintf(a.stdout, "pid=%d token=%d held\n", os.Getpid(), l.Token())
		if f, ok := a.stdout.(*os.File); ok {
			f.Sync()
		}
		time.Sleep(20 * time.Millisecond)
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
	_, err = l.CountDown(ctx)
	return err
}
