package drivertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// childProduce enqueues n events with ids (prefix "c<index>-") in batches, then
// enqueues them again: every one must be a duplicate of the first.
func childProduce(ctx context.Context, s driver.Store, env childEnv) error {
	q, err := queue.Open(ctx, s, env.name, frontOpts()...)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("c%d-", env.index)
	if _, err := produceErr(ctx, q, prefix, 1, env.n, 10); err != nil {
		return err
	}
	for i := 0; i < env.n; i += 25 {
		var evs []queue.Event
		for j := i; j < min(i+25, env.n); j++ {
			evs = append(evs, event(prefix, 0, j))
		}
		res, err := q.Enqueue(ctx, evs...)
		if err != nil {
			return err
		}
		for k, r := range res {
			if !r.Duplicate {
				return fmt.Errorf("re-enqueue of %s was not a duplicate: %+v", evs[k].ID, r)
			}
		}
	}
	return nil
}

// childConsume consumes group env.arg, printing "acked <payload>" for every successful
// ack, until its stdin closes; then it closes its consumer.
func childConsume(ctx context.Context, s driver.Store, env childEnv) error {
	q, err := queue.Open(ctx, s, env.name, frontOpts(queue.WithVisibility(time.Minute))...)
	if err != nil {
		return err
	}
	c, err := q.Consumer(ctx, env.arg)
	if err != nil {
		return err
	}
	var stop sync.Once
	stopped := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		stop.Do(func() { close(stopped) })
	}()
	out := bufio.NewWriter(os.Stdout)
	tl := &printer{w: out}
	done := func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	}
	for !done() && ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		msgs, err := c.Receive(rctx, 20)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			return err
		}
		for _, ms := range queue.ByPartition(msgs) {
			err := c.Ack(ctx, ms...)
			switch {
			case err == nil:
				tl.acked(ms)
			case errors.Is(err, dcsync.ErrLockLost):
				tl.line("lost %d messages of partition %d", len(ms), ms[0].Partition)
			default:
				return err
			}
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Close(cctx); err != nil {
		return err
	}
	return out.Flush()
}

type printer struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (p *printer) acked(msgs []*queue.Message) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		fmt.Fprintf(p.w, "acked %s %d %d %d %d\n", m.Payload, m.Partition, m.Seq, m.Attempt, m.Token)
	}
	p.w.Flush()
}

func (p *printer) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
	p.w.Flush()
}

// holdAll receives from group env.arg until it holds env.n messages, never acking.
// The consumer has lease l.
func holdAll(ctx context.Context, s driver.Store, env childEnv, l time.Duration) (*queue.Consumer, []*queue.Message, error) {
	q, err := queue.Open(ctx, s, env.name, frontOpts(queue.WithVisibility(time.Hour), queue.WithLease(l))...)
	if err != nil {
		return nil, nil, err
	}
	c, err := q.Consumer(ctx, env.arg)
	if err != nil {
		return nil, nil, err
	}
	var held []*queue.Message
	for len(held) < env.n {
		msgs, err := c.Receive(ctx, env.n-len(held))
		if err != nil {
			return c, held, err
		}
		held = append(held, msgs...)
	}
	return c, held, nil
}

// childHold holds env.n messages and waits to be killed. Its lease is the suite's
// long one, kept until the kill: the case counts the attempts its death costs.
func childHold(ctx context.Context, s driver.Store, env childEnv) error {
	_, held, err := holdAll(ctx, s, env, lease)
	if err != nil {
		return err
	}
	fmt.Printf("held %d\n", len(held))
	<-ctx.Done()
	return errors.New("not killed")
}

// childPause holds env.n messages, waits for a line on stdin (the parent stops and
// continues the process in between), then acks them: it prints "ack-lost" when the ack
// is refused with LockLost. Its lease is short (lapsing), so that the successor
// takes over soon after the stop. Before it says it holds them, it lets its store
// calls in flight return and fails the later ones until it is continued (freeze), so
// that it is stopped holding no lock of the store (a SQLite write transaction would
// block every other process until it continued).
func childPause(ctx context.Context, s driver.Store, env childEnv) error {
	fs := &stalling{Store: s}
	c, held, err := holdAll(ctx, fs, env, lapsing)
	if err != nil {
		return err
	}
	fs.freeze()
	fmt.Printf("held %d\n", len(held))
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	fs.stalled.Store(false)
	err = c.Ack(ctx, held...)
	switch {
	case errors.Is(err, dcsync.ErrLockLost):
		fmt.Println("ack-lost")
	default:
		fmt.Printf("ack-other %v\n", err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Close(cctx)
}

// waitOutput waits until the child printed want (or exited, or ctx ended).
func waitOutput(t *testing.T, ctx context.Context, c *child, want string) {
	t.Helper()
	for !strings.Contains(c.out.String(), want) {
		if ctx.Err() != nil || c.cmd.ProcessState != nil {
			t.Fatalf("child did not print %q:\n%s", want, c.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDrained waits until every group has acked every event of the queue's partitions,
// and the partitions hold total events.
func waitDrained(t *testing.T, ctx context.Context, q *queue.Queue, total uint64, groups ...string) {
	t.Helper()
	for {
		done := true
		for _, g := range groups {
			lag, err := q.Lag(ctx, g)
			must(t, err, "Lag")
			var heads uint64
			for _, l := range lag[:len(lag)-1] {
				heads += l.Head
				if l.Lag != 0 {
					done = false
				}
			}
			if heads != total {
				t.Fatalf("partitions hold %d events, want %d", heads, total)
			}
		}
		if done {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("groups %v still lag behind when the test's time ran out", groups)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func runFrontProcesses(t *testing.T, h Harness) {
	t.Run("ExactlyOnceAcrossProcesses", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		const producers, each = 2, 100
		q := createQueue(t, ctx, s, 6, []string{"a", "b"})
		consumers := map[string][]*child{}
		for i, g := range []string{"a", "a", "a", "b", "b"} {
			consumers[g] = append(consumers[g], startChild(t, h, "consume", q.Name(), 0, i, g))
		}
		var prods []*child
		for i := range producers {
			prods = append(prods, startChild(t, h, "produce", q.Name(), each, i, ""))
		}
		for i, c := range prods {
			if err := c.wait(); err != nil {
				t.Fatalf("producer %d: %v", i, err)
			}
		}
		waitDrained(t, ctx, q, producers*each, "a", "b")
		var want []string
		for i := range producers {
			for j := range each {
				want = append(want, string(event(fmt.Sprintf("c%d-", i), 0, j).Payload))
			}
		}
		for g, cs := range consumers {
			for _, c := range cs {
				c.stdin.Close()
			}
			got := map[string]int{}
			// Per-key order among the acks of every process, ordered by fencing token
			// (then in each process's order): tally.ackOrder.
			tl := newTally()
			tl.init(g)
			for i, c := range cs {
				if err := c.wait(); err != nil {
					t.Fatalf("group %s consumer %d: %v", g, i, err)
				}
				for _, line := range strings.Split(c.out.String(), "\n") {
					p, ok := strings.CutPrefix(line, "acked ")
					if !ok {
						continue
					}
					// payload partition seq attempt token
					f := strings.Fields(p)
					if len(f) != 5 {
						t.Fatalf("group %s consumer %d printed %q", g, i, line)
					}
					var token uint64
					if _, err := fmt.Sscan(f[4], &token); err != nil {
						t.Fatalf("group %s consumer %d printed %q: %v", g, i, line, err)
					}
					payload := f[0]
					got[payload]++
					// event(prefix, 0, j): payload "<prefix>w0/<j>", key "<prefix>w0-k<j mod 5>".
					j := index(payload)
					key := fmt.Sprintf("%s-k%d", payload[:strings.LastIndexByte(payload, '/')], j%5)
					tl.acks[g][key] = append(tl.acks[g][key], acked{token, j, fmt.Sprintf("consumer %d: %s", i, line)})
				}
			}
			for _, e := range tl.ackOrder(g) {
				t.Error(e)
			}
			for _, p := range want {
				if got[p] != 1 {
					t.Errorf("group %s: event %s acked %d times across processes, want exactly 1", g, p, got[p])
				}
			}
			if len(got) != len(want) {
				t.Errorf("group %s: %d distinct events acked, want %d", g, len(got), len(want))
			}
		}
	})

	t.Run("KilledConsumer", func(t *testing.T) {
		noQueueGoroutines(t)
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		const parts = 2
		q := createQueue(t, ctx, s, parts, []string{"g"}, queue.WithVisibility(time.Hour))
		want := produce(t, ctx, q, "", 2, 6, 3)
		c := startChild(t, h, "hold", q.Name(), len(want), 0, "g")
		waitOutput(t, ctx, c, fmt.Sprintf("held %d", len(want)))
		must(t, c.cmd.Process.Kill(), "kill child")
		_ = c.wait()
		b, err := q.Consumer(ctx, "g")
		must(t, err, "Consumer")
		defer b.Close(context.Background())
		tl := newTally()
		firstAttempt := map[int]int{}
		err = consumeWith(ctx, b, func(msgs []*queue.Message) {
			for _, m := range msgs {
				if _, ok := firstAttempt[m.Partition]; !ok && m.Seq == 0 {
					firstAttempt[m.Partition] = m.Attempt
				}
			}
		}, "g", tl, func() bool { return tl.count("g") >= len(want) })
		must(t, err, "consume")
		tl.check(t, "g", want)
		for p, n := range firstAttempt {
			if n != 2 {
				t.Errorf("partition %d: first event delivered after the kill as attempt %d, want 2", p, n)
			}
		}
	})

	t.Run("PausedConsumer", func(t *testing.T) {
		if !canPause {
			t.Skip("no SIGSTOP on this system")
		}
		noQueueGoroutines(t)
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		const parts = 2
		q := createQueue(t, ctx, s, parts, []string{"g"}, queue.WithVisibility(time.Hour))
		want := produce(t, ctx, q, "", 2, 6, 3)
		c := startChild(t, h, "pause", q.Name(), len(want), 0, "g")
		waitOutput(t, ctx, c, fmt.Sprintf("held %d", len(want)))
		must(t, pause(c), "SIGSTOP child")
		t.Cleanup(func() { _ = resume(c) })
		b, err := q.Consumer(ctx, "g")
		must(t, err, "Consumer")
		defer b.Close(context.Background())
		got := receiveAll(t, ctx, b, len(want))
		must(t, resume(c), "SIGCONT child")
		_, err = c.stdin.Write([]byte("ack\n"))
		must(t, err, "tell the child to ack")
		if err := c.wait(); err != nil {
			t.Fatalf("paused child: %v", err)
		}
		if !strings.Contains(c.out.String(), "ack-lost") {
			t.Fatalf("paused child's late Ack was not refused with LockLost:\n%s", c.out)
		}
		lag, err := q.Lag(ctx, "g")
		must(t, err, "Lag")
		for _, l := range lag[:parts] {
			if l.Next != 0 {
				t.Fatalf("partition %d offset %d after the paused child's refused ack, want 0", l.Partition, l.Next)
			}
		}
		tl := newTally()
		ackThenConsume(t, ctx, b, "g", tl, got, want)
		tl.check(t, "g", want)
	})
}
