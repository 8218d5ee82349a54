package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/queue"
)

// The demo's queue phase: the parent enqueues keyed events while the worker processes,
// one consumer group, receive and ack them; then it checks from the workers' reports
// that every event was acked exactly once and that each key's events were acked in
// order.
const (
	demoPartitions = 8
	demoKeys       = 8
	demoGroup      = "workers"
	demoBatch      = 8
)

func demoQueueOptions() []queue.Option {
	// A short lease so that partitions spread over the workers as they join.
	return []queue.Option{queue.WithLease(2 * time.Second), queue.WithPollInterval(50 * time.Millisecond)}
}

// demoCreateQueue creates the demo's queue and the latch that tells the workers to stop.
func (a *app) demoCreateQueue(ctx context.Context, s driver.Store, lm *latch.Manager, name string) (*queue.Queue, *latch.CountDownLatch, error) {
	q, err := queue.Create(ctx, s, queue.Spec{Name: name, Partitions: demoPartitions, Groups: []string{demoGroup}},
		append(demoQueueOptions(), queue.WithIdentity(a.client, a.farm))...)
	if err != nil {
		return nil, nil, err
	}
	done, err := lm.CreateCountDown(ctx, name+"-done", 1, latch.TTL(10*time.Minute))
	if err != nil {
		return nil, nil, err
	}
	return q, done, nil
}

// demoProduce enqueues n events in batches, spread over time so that consumers join
// and leave while it runs, then waits until the group has acked everything and tells
// the workers to stop.
func (a *app) demoProduce(ctx context.Context, q *queue.Queue, done *latch.CountDownLatch, n int) error {
	for i := 0; i < n; i += demoBatch {
		var evs []queue.Event
		for j := i; j < min(i+demoBatch, n); j++ {
			evs = append(evs, queue.Event{Key: "k" + strconv.Itoa(j%demoKeys), ID: "e" + strconv.Itoa(j), Payload: []byte(strconv.Itoa(j))})
		}
		if _, err := q.Enqueue(ctx, evs...); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(60 * time.Millisecond):
		}
	}
	for {
		lag, err := q.Lag(ctx, demoGroup)
		if err != nil {
			return err
		}
		left := uint64(0)
		for _, l := range lag {
			left += l.Lag
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
	_, err := done.CountDown(ctx)
	return err
}

// demoConsume is a worker's queue phase: it receives and acks until the done latch
// reaches zero, and reports each acked event.
func (a *app) demoConsume(ctx context.Context, s driver.Store, name string) error {
	q, err := queue.Open(ctx, s, name, append(demoQueueOptions(), queue.WithIdentity(a.client, a.farm))...)
	if err != nil {
		return err
	}
	lm, err := latch.New(s, a.client, a.farm)
	if err != nil {
		return err
	}
	done, err := lm.GetCountDown(name + "-done")
	if err != nil {
		return err
	}
	c, err := q.Consumer(ctx, demoGroup)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	for {
		n, err := done.Count(ctx)
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		msgs, err := c.Receive(rctx, 32)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		// The time is taken before the ack: an ack that succeeds happens before the
		// partition's next owner can claim it, so these times order each key's acks
		// across processes (a time taken after Ack returns could come after the next
		// owner's).
		at := time.Now().UnixNano()
		for _, batch := range queue.ByPartition(msgs) {
			// Each partition is acked on its own, so that a partition whose lease ran
			// out (a loaded machine can delay a renewal past it) refuses only its own
			// events: those go to the partition's next owner, and this worker goes on.
			if err := c.Ack(ctx, batch...); errors.Is(err, dcsync.ErrLockLost) {
				fmt.Fprintf(a.stderr, "worker %d: partition %d moved on before its ack (%v); its next owner gets its events\n",
					os.Getpid(), batch[0].Partition, err)
				continue
			} else if err != nil {
				return err
			}
			for _, m := range batch {
				fmt.Fprintf(a.stdout, "event pid=%d id=%s key=%s partition=%d seq=%d token=%d acked=%d\n",
					os.Getpid(), m.ID, m.Key, m.Partition, m.Seq, m.Token, at)
			}
		}
	}
}

// ackedEvent is one event a worker reports acked.
type ackedEvent struct {
	pid       int
	id, key   string
	partition int
	seq       uint64
	token     uint64
	at        int64
}

func parseAcked(line string) (ackedEvent, bool) {
	var e ackedEvent
	_, err := fmt.Sscanf(line, "event pid=%d id=%s key=%s partition=%d seq=%d token=%d acked=%d",
		&e.pid, &e.id, &e.key, &e.partition, &e.seq, &e.token, &e.at)
	return e, err == nil
}

// checkAcked checks what the demo claims of the queue: each of the n events acked
// exactly once, and each key's events acked in sequence order, with fencing tokens
// that never go back within a partition. It returns the number of processes that
// acked events.
func checkAcked(es []ackedEvent, n int) (int, error) {
	seen := map[string]ackedEvent{}
	for _, e := range es {
		if p, dup := seen[e.id]; dup {
			return 0, fmt.Errorf("event %s acked twice: by pid %d (token %d) and pid %d (token %d)", e.id, p.pid, p.token, e.pid, e.token)
		}
		seen[e.id] = e
	}
	for i := 0; i < n; i++ {
		if _, ok := seen["e"+strconv.Itoa(i)]; !ok {
			return 0, fmt.Errorf("event e%d was never acked", i)
		}
	}
	if len(seen) != n {
		return 0, fmt.Errorf("%d distinct events acked, want %d", len(seen), n)
	}
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].at != es[j].at {
			return es[i].at < es[j].at
		}
		return es[i].seq < es[j].seq
	})
	lastSeq := map[string]ackedEvent{}
	lastToken := map[int]uint64{}
	pids := map[int]bool{}
	for _, e := range es {
		pids[e.pid] = true
		if p, ok := lastSeq[e.key]; ok && e.seq <= p.seq {
			return 0, fmt.Errorf("key %s: seq %d (pid %d) acked after seq %d (pid %d)", e.key, e.seq, e.pid, p.seq, p.pid)
		}
		lastSeq[e.key] = e
		if e.token < lastToken[e.partition] {
			return 0, fmt.Errorf("partition %d: token %d acked after token %d", e.partition, e.token, lastToken[e.partition])
		}
		lastToken[e.partition] = e.token
	}
	return len(pids), nil
}
