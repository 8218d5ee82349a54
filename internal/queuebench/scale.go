package queuebench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// ScaleConfig is one run of Scale: a group of Consumers consumers, each its own
// process as far as the queue can tell (its own store handle value, so its own hub,
// its own queue handle and lock manager), on a queue of Partitions partitions with no
// events.
type ScaleConfig struct {
	// Store is the shared store. Every consumer gets its own Count wrapper of it (all
	// counting into one Counts).
	Store driver.Store
	// Partitions and Consumers: P and C.
	Partitions, Consumers int
	// Lease and Poll are the queue's lease and poll interval (defaults 10 s and
	// queue.DefaultPollInterval).
	Lease, Poll time.Duration
	// Idle is how long the idle group is measured once balanced (default 2 s).
	Idle time.Duration
	// BalanceWithin bounds the wait for a balanced group (default 2 min); a run not
	// balanced by then reports Balanced = -1 and measures the idle window anyway.
	BalanceWithin time.Duration
	// Trace logs the group's progress while it balances.
	Trace bool
	// Handles is how many store handles the consumers are spread over, round robin
	// (default 1: all on one handle, as one process's consumers). Each handle has its
	// own hub and its own marks of the member slots its consumers try, as a process
	// of its own has: Handles = Consumers starts the group as C processes of one
	// consumer each would, racing for member slots.
	Handles int
}

// ScaleResult is what Scale measured.
type ScaleResult struct {
	// StartCalls are the store calls from the first Queue.Consumer until the group
	// was balanced (every consumer owning P/C or P/C+1 partitions, all P owned).
	StartCalls Calls
	// Started is how long the C Queue.Consumer calls took; Balanced is the time from the
	// last of them to a balanced group (-1: not balanced within BalanceWithin).
	Started, Balanced time.Duration
	// IdleCalls are the calls during the idle window of IdleFor, every consumer
	// waiting in Receive.
	IdleCalls Calls
	IdleFor   time.Duration
}

// PerSecond returns the idle calls per second, by operation.
func (r ScaleResult) PerSecond(op string) float64 {
	return float64(r.IdleCalls[op]) / r.IdleFor.Seconds()
}

// String is one line: the idle calls/s in total and by operation, the start.
func (r ScaleResult) String() string {
	bal := "not balanced"
	if r.Balanced >= 0 {
		bal = r.Balanced.Round(time.Millisecond).String() + " to balanced"
	}
	return fmt.Sprintf("idle %.1f calls/s (%v in %v); start: %d calls (%v), %v to start, %s",
		float64(r.IdleCalls.Total())/r.IdleFor.Seconds(), r.IdleCalls, r.IdleFor.Round(time.Millisecond),
		r.StartCalls.Total(), r.StartCalls, r.Started.Round(time.Millisecond), bal)
}

// Scale starts cfg.Consumers consumers of one group one after another, waits until the
// group is balanced, then counts the store calls of the idle group for cfg.Idle. It
// closes the consumers before it returns.
func Scale(tb testing.TB, cfg ScaleConfig) ScaleResult {
	tb.Helper()
	if cfg.Lease == 0 {
		cfg.Lease = 10 * time.Second
	}
	if cfg.Poll == 0 {
		cfg.Poll = queue.DefaultPollInterval
	}
	if cfg.Idle == 0 {
		cfg.Idle = 2 * time.Second
	}
	if cfg.BalanceWithin == 0 {
		cfg.BalanceWithin = 2 * time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counts := NewCounts()
	opts := []queue.Option{queue.WithLease(cfg.Lease), queue.WithPollInterval(cfg.Poll)}
	qname := fmt.Sprintf("scale-%d-%d-%d", cfg.Partitions, cfg.Consumers, time.Now().UnixNano()%1e9)
	if _, err := queue.Create(ctx, cfg.Store, queue.Spec{Name: qname, Partitions: cfg.Partitions, Groups: []string{"g"}}, opts...); err != nil {
		tb.Fatal(err)
	}
	// Each consumer's own queue handle, on one of cfg.Handles store handles (the
	// consumers of one handle share its hub, as a process's consumers do), opened
	// before the clock starts.
	qs := make([]*queue.Queue, cfg.Consumers)
	sts := make([]driver.Store, max(cfg.Handles, 1))
	for i := range sts {
		sts[i] = Count(cfg.Store, counts)
	}
	for i := range qs {
		q, err := queue.Open(ctx, sts[i%len(sts)], qname, opts...)
		if err != nil {
			tb.Fatal(err)
		}
		qs[i] = q
	}
	var res ScaleResult
	cs := make([]*queue.Consumer, 0, cfg.Consumers)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		var w sync.WaitGroup
		for _, c := range cs {
			w.Add(1)
			go func() {
				defer w.Done()
				c.Close(cctx)
			}()
		}
		w.Wait()
	}()
	before := counts.Snapshot()
	start := time.Now()
	for _, q := range qs {
		c, err := q.Consumer(ctx, "g")
		if err != nil {
			tb.Fatal(err)
		}
		cs = append(cs, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := c.Receive(ctx, 10); err != nil && !errors.Is(err, context.Canceled) {
					tb.Errorf("receive: %v", err)
					return
				}
			}
		}()
	}
	res.Started = time.Since(start)
	joined := time.Now()
	res.Balanced = -1
	lastTrace := time.Now()
	for time.Since(joined) < cfg.BalanceWithin {
		if balanced(cs, cfg.Partitions) {
			res.Balanced = time.Since(joined)
			break
		}
		if cfg.Trace && time.Since(lastTrace) > 250*time.Millisecond {
			lastTrace = time.Now()
			lo, hi, total := cfg.Partitions, 0, 0
			for _, c := range cs {
				n := len(c.Partitions())
				lo, hi, total = min(lo, n), max(hi, n), total+n
			}
			tb.Logf("%v after the last join: %d partitions owned, %d to %d per consumer; %v",
				time.Since(joined).Round(time.Millisecond), total, lo, hi, counts.Snapshot().Sub(before))
		}
		time.Sleep(2 * time.Millisecond)
	}
	res.StartCalls = counts.Snapshot().Sub(before)
	idle := counts.Snapshot()
	t0 := time.Now()
	time.Sleep(cfg.Idle)
	res.IdleCalls = counts.Snapshot().Sub(idle)
	res.IdleFor = time.Since(t0)
	return res
}

// balanced reports whether every partition is owned and each consumer owns P/C or
// P/C+1 of them (with P < C: one or none).
func balanced(cs []*queue.Consumer, p int) bool {
	lo, hi := p/len(cs), (p+len(cs)-1)/len(cs)
	total := 0
	for _, c := range cs {
		n := len(c.Partitions())
		if n < lo || n > hi {
			return false
		}
		total += n
	}
	return total == p
}
