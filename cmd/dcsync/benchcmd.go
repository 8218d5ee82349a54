package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/semaphore"
)

// The queue operations of 'bench': batches of benchBatch events of benchPayload bytes
// each, in a queue of one partition (so the raw floor reads and writes the rows of one
// partition too).
const (
	benchBatch   = 100
	benchPayload = 1024
)

// benchPrimitive names the election, semaphore and read-write lock of 'bench'. They keep
// a register each, which no store deletes (a register's generations never go back), so
// their names are fixed, not the run's: every run of a client reuses the same three.
const benchPrimitive = "dcsync-bench"

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
each stands on, in one run: lock acquire+release, latch count-down, count, enqueue of a
batch of 100 events of 1 KiB, receive+ack of such a batch, and the wake-up of an await
after a count-down made through the store by someone else. Each
dcsync operation alternates with its raw counterpart in one loop, so that the noise of
a busy machine falls on both alike; the ratio of their medians is the figure to read.
The raw operations are those the Java libraries send where they exist (Aerospike: a
gen-0 put and a delete, an operate add, a get; HBase: a check-and-put and a Delete, an
Increment, a Get; SQLite: one autocommitted statement each; memory: a map access). The
queue's floor is the raw write of the same rows in one batched call (enqueue), and a raw
read of the same rows plus one raw offset write per batch (receive+ack: the least a
durable ack costs), on rows shaped as the queue's entries in its own table or set.

It also times an election's campaign+resign, a semaphore permit's acquire+release and
a read-write lock's read and write round trips, each next to the raw lock pair.
It writes only records of its own, named for the run (client "dcsync-bench" unless
--client is given; the queue "bench-<run id>"), and deletes them when it ends, also
when it fails or is interrupted (the queue with queue.Delete). The exception is the
three small registers of its election, semaphore and read-write lock, all named
"dcsync-bench": no store deletes a register, so every run reuses the same three.
--duration is shared by the operations.`,
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

	qraw, ok := raw.(driver.QueueBaseline)
	if !ok {
		return driver.Errorf(dcsync.NotImplemented, "bench", "this store offers no raw queue operations to compare with")
	}
	qopts := []queue.Option{queue.WithIdentity(client, a.farm), queue.WithPollInterval(f.poll), queue.WithLogger(slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	q, err := queue.Create(ctx, s, queue.Spec{Name: run, Partitions: 1, Groups: []string{"bench"}}, qopts...)
	if err != nil {
		return err
	}
	var consumer *queue.Consumer
	defer func() {
		cctx, cancel := context.WithTimeout(cleanup, 30*time.Second)
		defer cancel()
		if consumer != nil {
			err = errors.Join(err, consumer.Close(cctx))
		}
		err = errors.Join(err, queue.Delete(cctx, s, run, append(qopts, queue.WithForce())...))
	}()
	batch := make([]queue.Event, benchBatch)
	rows := make([][]byte, benchBatch)
	for i := range batch {
		rows[i] = make([]byte, benchPayload)
		_, _ = rand.Read(rows[i])
		batch[i] = queue.Event{Payload: rows[i]}
	}
	var queued, next int64 // events enqueued; events received and acked (the raw offset)
	// The consumer runs only while receive+ack is measured: its background writes
	// would otherwise contend with the other operations' (on SQLite, the raw
	// statements find the file locked).
	receiveAck := func() (err error) {
		if consumer == nil {
			if consumer, err = q.Consumer(ctx, "bench", queue.Prefetch(benchBatch)); err != nil {
				return err
			}
		}
		if queued-next < benchBatch { // untimed: enqueue what the batch will take
			if _, err := q.Enqueue(ctx, batch...); err != nil {
				return err
			}
			queued += benchBatch
		}
		return nil
	}

	elections, err := election.New(s, client, a.farm, election.WithTTL(30*time.Second))
	if err != nil {
		return err
	}
	sems, err := semaphore.New(s, client, a.farm, semaphore.WithTTL(30*time.Second))
	if err != nil {
		return err
	}
	sem, err := sems.Open(ctx, benchPrimitive, 1)
	if err != nil {
		return fmt.Errorf("semaphore %q of 1 permit: %w", benchPrimitive, err)
	}
	rws, err := rwlock.New(s, client, a.farm, rwlock.WithTTL(30*time.Second))
	if err != nil {
		return err
	}

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
		{"election campaign+resign", desc["lock"], func() error {
			ld, err := elections.Campaign(ctx, benchPrimitive, run)
			if err != nil {
				return err
			}
			return ld.Resign(ctx)
		}, func() error { return raw.LockPair(ctx) }},
		{"semaphore acquire+release", desc["lock"], func() error {
			p, err := sem.TryAcquire(ctx, 1)
			if err != nil {
				return err
			}
			return p.Release(ctx)
		}, func() error { return raw.LockPair(ctx) }},
		{"rwlock read+release", desc["lock"], func() error {
			l, err := rws.AcquireRead(ctx, benchPrimitive, rwlock.Wait(0))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}, func() error { return raw.LockPair(ctx) }},
		{"rwlock write+release", desc["lock"], func() error {
			l, err := rws.AcquireWrite(ctx, benchPrimitive, rwlock.Wait(0))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}, func() error { return raw.LockPair(ctx) }},
		{"latch count-down", desc["add"], func() error { _, err := counter.CountDown(ctx); return err },
			func() error { return raw.Add(ctx, -1) }},
		{"latch count", desc["get"], func() error { _, err := counter.Count(ctx); return err },
			func() error { return raw.Get(ctx) }},
		{fmt.Sprintf("enqueue (%d events)", benchBatch), desc["enqueue"], func() error {
			_, err := q.Enqueue(ctx, batch...)
			queued += benchBatch
			return err
		}, func() error { return qraw.WriteRows(ctx, rows) }},
		{fmt.Sprintf("receive+ack (%d events)", benchBatch), desc["receive"], func() error {
			var got []*queue.Message
			for len(got) < benchBatch {
				msgs, err := consumer.Receive(ctx, benchBatch-len(got))
				if err != nil {
					return err
				}
				got = append(got, msgs...)
			}
			next += benchBatch
			return consumer.Ack(ctx, got...)
		}, func() error {
			n, err := qraw.ReadRows(ctx, benchBatch)
			if err == nil && n != benchBatch {
				err = fmt.Errorf("raw read got %d rows, want %d", n, benchBatch)
			}
			if err != nil {
				return err
			}
			return qraw.CommitOffset(ctx, next)
		}},
	}
	// Receive+ack: enqueue what each batch takes, untimed, and take one batch untimed
	// first (the consumer joins its group and takes the partition).
	prepare := map[int]func() error{len(ops) - 1: receiveAck}
	warm := map[int]bool{len(ops) - 1: true}
	share := f.duration / time.Duration(len(ops)+1)
	var results []*benchResult
	for i, op := range ops {
		r := &benchResult{Op: op.name, Raw: op.raw}
		if strings.HasPrefix(op.name, "enqueue") || strings.HasPrefix(op.name, "receive") {
			r.Note = "queue " + run + ", 1 partition, deleted at the end"
		}
		if warm[i] {
			for _, f := range []func() error{prepare[i], op.dcsync, op.floor} {
				if err := f(); err != nil {
					return fmt.Errorf("%s (warm-up): %w", op.name, err)
				}
			}
		}
		end := time.Now().Add(share)
		for n := 0; n < 2 || time.Now().Before(end); n++ {
			if prep := prepare[i]; prep != nil {
				if err := prep(); err != nil {
					return fmt.Errorf("%s: %w", op.name, err)
				}
			}
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
		if consumer != nil {
			err := consumer.Close(ctx)
			consumer = nil
			if err != nil {
				return err
			}
		}
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
