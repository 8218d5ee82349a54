package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

// benchFlags are the flags of 'bench'.
type benchFlags struct {
	duration time.Duration
	poll     time.Duration
	asJSON   bool
}

// benchResult is one operation of 'bench': the dcsync operation's latencies next to the
// raw store operation it stands on, both measured in one loop that alternates them, so
// that a busy machine's noise falls on both alike. It is also the JSON of 'bench --json'
// (an array of these).
type benchResult struct {
	Op        string  `json:"op"`
	N         int     `json:"n"`
	P50NS     int64   `json:"p50_ns"`
	P99NS     int64   `json:"p99_ns"`
	Raw       string  `json:"raw,omitempty"`
	RawP50NS  int64   `json:"raw_p50_ns,omitempty"`
	RawP99NS  int64   `json:"raw_p99_ns,omitempty"`
	RatioP50  float64 `json:"ratio_p50,omitempty"`
	Note      string  `json:"note,omitempty"`
	durations []time.Duration
	raws      []time.Duration
}

// newBenchCmd is 'bench'.
func newBenchCmd(a *app) *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Time dcsync's operations on the store next to the raw store operations they stand on",
		Long: `Time dcsync's operations against the store (--store) next to the raw store operation
each stands on, in one run: lock acquire+release, latch count-down, count, and the
wake-up of an await after a count-down made through the store by someone else. Each
dcsync operation alternates with its raw counterpart in one loop, so that the noise of
a busy machine falls on both alike; the ratio of their medians is the figure to read.
The raw operations are those the Java libraries send where they exist (Aerospike: a
gen-0 put and a delete, an operate add, a get; HBase: a check-and-put and a Delete, an
Increment, a Get; SQLite: one autocommitted statement each; memory: a map access).

It writes only records of its own, named for the run (client "dcsync-bench" unless
--client is given), and deletes them when it ends, also when it fails or is
interrupted. --duration is shared by the operations.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if f.duration <= 0 || f.duration > time.Hour {
				return withCode(exitUsage, fmt.Errorf("--duration %s: must be above 0 and at most 1h", f.duration))
			}
			if f.poll < time.Millisecond || f.poll > time.Minute {
				return withCode(exitUsage, fmt.Errorf("--poll %s: must be between 1ms and 1m", f.poll))
			}
			return a.bench(c.Context(), f)
		},
	}
	cmd.Flags().DurationVar(&f.duration, "duration", 10*time.Second, "total time to spend, shared by the operations")
	cmd.Flags().DurationVar(&f.poll, "poll", 50*time.Millisecond, "await's poll interval (the wake-up is measured with it)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the results as a JSON array")
	return cmd
}

// bench runs 'bench'. Everything it writes is named with a random run id and removed
// before it returns, on a context of its own so that an interrupt still cleans up.
func (a *app) bench(ctx context.Context, f *benchFlags) (err error) {
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	bl, ok := s.(driver.Baseliner)
	if !ok {
		return driver.Errorf(dcsync.NotImplemented, "bench", "this store offers no raw operations to compare with")
	}
	client := a.client
	if client == "" {
		client = "dcsync-bench"
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	run := "bench-" + hex.EncodeToString(id[:])
	cleanup := context.WithoutCancel(ctx)

	raw, err := bl.Baseline(ctx, run)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(cleanup, 30*time.Second)
		defer cancel()
		err = errors.Join(err, raw.Close(cctx))
	}()
	locks, err := lock.New(s, client, a.farm, lock.WithTTL(30*time.Second))
	if err != nil {
		return err
	}
	latches, err := latch.New(s, client, a.farm, latch.WithPollInterval(f.poll))
	if err != nil {
		return err
	}
	// The latches this run creates, deleted at the end (they also end with their TTL).
	var made []dcsync.Key
	defer func() {
		d, ok := s.(driver.LatchDeleter)
		if !ok {
			return
		}
		cctx, cancel := context.WithTimeout(cleanup, 30*time.Second)
		defer cancel()
		for _, k := range made {
			if derr := d.DeleteLatch(cctx, k); derr != nil && !errors.Is(derr, dcsync.ErrNotFound) {
				err = errors.Join(err, derr)
			}
		}
	}()
	key := func(name string) dcsync.Key {
		return dcsync.Key{Client: client, Farm: a.farm, Name: name, Level: dcsync.DC}
	}
	const latchTTL = time.Hour
	counter, err := latches.CreateCountUpDown(ctx, run+"-count", 1<<40, latch.TTL(latchTTL))
	if err != nil {
		return err
	}
	made = append(made, key(run+"-count"))

	desc := raw.Describe()
	lockName := run + "-lock"
	ops := []struct {
		name, raw string
		dcsync    func() error
		floor     func() error
	}{
		{"lock acquire+release", desc["lock"], func() error {
			l, err := locks.TryAcquire(ctx, lockName)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}, func() error { return raw.LockPair(ctx) }},
		{"latch count-down", desc["add"], func() error { _, err := counter.CountDown(ctx); return err },
			func() error { return raw.Add(ctx, -1) }},
		{"latch count", desc["get"], func() error { _, err := counter.Count(ctx); return err },
			func() error { return raw.Get(ctx) }},
	}
	share := f.duration / time.Duration(len(ops)+1)
	var results []*benchResult
	for _, op := range ops {
		r := &benchResult{Op: op.name, Raw: op.raw}
		end := time.Now().Add(share)
		for n := 0; n < 2 || time.Now().Before(end); n++ {
			t0 := time.Now()
			if err := op.dcsync(); err != nil {
				return fmt.Errorf("%s: %w", op.name, err)
			}
			t1 := time.Now()
			if err := op.floor(); err != nil {
				return fmt.Errorf("%s (raw): %w", op.name, err)
			}
			r.durations, r.raws = append(r.durations, t1.Sub(t0)), append(r.raws, time.Since(t1))
		}
		results = append(results, r)
	}

	// Await: a Wait on a latch of count 1, woken by a count-down sent straight to the
	// store, as another process's would be: the watcher sees it at its next read.
	w := &benchResult{Op: "await wake-up", Note: fmt.Sprintf("after a remote count-down, poll %s", f.poll)}
	end := time.Now().Add(share)
	for i := 0; i < 2 || time.Now().Before(end); i++ {
		name := fmt.Sprintf("%s-await-%d", run, i)
		l, err := latches.CreateCountDown(ctx, name, 1, latch.TTL(latchTTL))
		if err != nil {
			return err
		}
		made = append(made, key(name))
		woke := make(chan time.Time, 1)
		werr := make(chan error, 1)
		go func() {
			err := l.Wait(ctx)
			woke <- time.Now()
			werr <- err
		}()
		// Let the Wait join the watcher before the count-down (a Wait returns only on
		// what was observed after it began).
		time.Sleep(f.poll)
		sent := time.Now()
		if _, err := s.AddLatch(ctx, key(name), -1); err != nil {
			return err
		}
		at := <-woke
		if err := <-werr; err != nil {
			return fmt.Errorf("await: %w", err)
		}
		w.durations = append(w.durations, at.Sub(sent))
	}
	results = append(results, w)

	for _, r := range results {
		r.N = len(r.durations)
		r.P50NS, r.P99NS = pct(r.durations, 50), pct(r.durations, 99)
		if len(r.raws) > 0 {
			r.RawP50NS, r.RawP99NS = pct(r.raws, 50), pct(r.raws, 99)
			if r.RawP50NS > 0 {
				r.RatioP50 = float64(r.P50NS) / float64(r.RawP50NS)
			}
		}
	}
	if f.asJSON {
		return a.printJSON(results)
	}
	tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tN\tP50\tP99\tRAW P50\tRAW P99\tRATIO\tRAW OPERATION")
	for _, r := range results {
		if r.Raw == "" {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t-\t-\t-\t(%s)\n", r.Op, r.N, dur(r.P50NS), dur(r.P99NS), r.Note)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%.2fx\t%s\n", r.Op, r.N, dur(r.P50NS), dur(r.P99NS),
			dur(r.RawP50NS), dur(r.RawP99NS), r.RatioP50, r.Raw)
	}
	return tw.Flush()
}

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) int64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return int64(s[max(i-1, 0)])
}

func dur(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(100 * time.Nanosecond).String()
}
