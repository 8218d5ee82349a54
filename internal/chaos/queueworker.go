package chaos

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/dcsync/dcsync/queue"
)

// poisonPayload marks an event that consumers nack on every delivery, so that it
// reaches the dead-letter partition after MaxAttempts deliveries.
const poisonPayload = "poison"

// QueueProducer enqueues events with unique ids until ctx ends, and records every
// event of every Enqueue call and its result. A call that fails is retried with the
// same ids (up to three times; a run resolves what stays unknown at its end), and now
// and then an id already stored is enqueued again, which must find it where it is.
type QueueProducer struct {
	Client int
	Queue  *queue.Queue
	// Prefix starts every id (unique per run); ids are Prefix-client-n.
	Prefix string
	// Keys is the number of distinct partition keys; one event in five has none.
	Keys int
	// Batch bounds the events of one Enqueue (1 to Batch).
	Batch int
	// PoisonEvery makes every n-th event a poison event (0: none).
	PoisonEvery int
	// Pause spaces the calls.
	Pause time.Duration
	Out   QueueSink
}

// Run works until ctx ends. It returns the number of events it enqueued (ids).
func (w QueueProducer) Run(ctx context.Context) int {
	op, n := 0, 0
	var stored []queue.Event
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w.Client)))
	enqueue := func(events []queue.Event) bool {
		op++
		for _, e := range events {
			w.Out(QueueRecord{Client: w.Client, Op: op, Phase: PhaseCall, Kind: QueueKindEnqueue, ID: e.ID, Key: e.Key, At: now()})
		}
		// The call runs to completion even when the run is ending: a call cut off by
		// our own cancellation would leave its outcome unknown for no reason.
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := w.Queue.Enqueue(cctx, events...)
		cancel()
		at := now()
		for i, e := range events {
			rec := QueueRecord{Client: w.Client, Op: op, Phase: PhaseReturn, Kind: QueueKindEnqueue, ID: e.ID, Key: e.Key, Outcome: outcomeOf(err), At: at}
			if err == nil {
				rec.Partition, rec.Seq, rec.Duplicate = res[i].Partition, res[i].Seq, res[i].Duplicate
			}
			w.Out(rec)
		}
		return err == nil
	}
	for sleep(ctx, w.Pause) {
		if len(stored) > 0 && r.IntN(50) == 0 {
			// An id already stored, again: a producer retrying after a lost reply.
			enqueue([]queue.Event{stored[r.IntN(len(stored))]})
			continue
		}
		events := make([]queue.Event, 1+r.IntN(max(w.Batch, 1)))
		for i := range events {
			n++
			e := queue.Event{ID: w.Prefix + "-" + strconv.Itoa(w.Client) + "-" + strconv.Itoa(n), Payload: []byte("event")}
			if r.IntN(5) != 0 && w.Keys > 0 {
				e.Key = "k" + strconv.Itoa(r.IntN(w.Keys))
			}
			if w.PoisonEvery > 0 && n%w.PoisonEvery == 0 {
				e.Payload = []byte(poisonPayload)
			}
			events[i] = e
		}
		for try := 0; try < 4; try++ {
			if enqueue(events) {
				break
			}
			sleep(ctx, 50*time.Millisecond)
		}
		stored = append(stored, events...)
	}
	return n
}

// QueueConsumer receives from one group (or its dead-letter partition) until ctx
// ends, nacks some messages and acks the rest, and records every call and return. It
// may leave the group now and then and join again (a rebalance with no fault).
type QueueConsumer struct {
	Client int
	Queue  *queue.Queue
	Group  string
	// Dead makes it a consumer of the group's dead-letter partition: it acks all.
	Dead bool
	// Batch is Receive's maximum.
	Batch int
	// NackPercent is the share of deliveries it nacks (poison events: all of them).
	NackPercent int
	// Churn makes it leave the group (Close) after 1 to 2×Churn receives and join
	// again (0: never).
	Churn int
	Out   QueueSink
}

// Run works until ctx ends. It returns the number of messages it received.
func (w QueueConsumer) Run(ctx context.Context) int {
	op, received := 0, 0
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w.Client)))
	rec := func(q QueueRecord) {
		q.Client, q.Op, q.Group, q.Dead = w.Client, op, w.Group, w.Dead
		w.Out(q)
	}
	var opts []queue.CallOption
	if w.Dead {
		opts = append(opts, queue.DeadLetters())
	}
	for ctx.Err() == nil {
		c, err := w.Queue.Consumer(ctx, w.Group, opts...)
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		rounds := -1
		if w.Churn > 0 {
			rounds = 1 + r.IntN(2*w.Churn)
		}
		for ; rounds != 0 && ctx.Err() == nil; rounds-- {
			op++
			rec(QueueRecord{Phase: PhaseCall, Kind: QueueKindReceive, At: now()})
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			msgs, err := c.Receive(rctx, max(w.Batch, 1))
			cancel()
			at := now()
			for i, m := range msgs {
				rec(QueueRecord{Phase: PhaseReturn, Kind: QueueKindDeliver, ID: m.ID, Key: m.Key, Partition: m.Partition,
					Seq: m.Seq, Token: m.Token, Attempt: m.Attempt, Index: i, From: m.DeadFrom, At: at})
			}
			rec(QueueRecord{Phase: PhaseReturn, Kind: QueueKindReceive, Outcome: outcomeOf(err), At: at})
			received += len(msgs)
			for _, part := range queue.ByPartition(msgs) {
				op = w.handle(c, r, part, op)
			}
		}
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = c.Close(cctx)
		cancel()
		if ctx.Err() == nil {
			op++
			rec(QueueRecord{Kind: QueueKindFault, Key: "leave-join", At: now()})
		}
	}
	return received
}

// handle nacks or acks the messages of one partition, in order: a nacked message's
// later messages of the same key were sent back with it (see Consumer.Nack) and are
// left alone; the rest are acked in one call. It returns the last operation number.
func (w QueueConsumer) handle(c *queue.Consumer, r *rand.Rand, msgs []*queue.Message, op int) int {
	rec := func(q QueueRecord) {
		q.Client, q.Op, q.Group, q.Dead = w.Client, op, w.Group, w.Dead
		w.Out(q)
	}
	msgRec := func(phase, kind string, m *queue.Message) QueueRecord {
		return QueueRecord{Phase: phase, Kind: kind, ID: m.ID, Key: m.Key, Partition: m.Partition, Seq: m.Seq,
			Token: m.Token, Attempt: m.Attempt, At: now()}
	}
	nacked := map[string]bool{}
	var ack []*queue.Message
	for _, m := range msgs {
		if m.Key != "" && nacked[m.Key] {
			continue
		}
		if !w.Dead && (string(m.Payload) == poisonPayload || r.IntN(100) < w.NackPercent) {
			op++
			rec(msgRec(PhaseCall, QueueKindNack, m))
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := c.Nack(cctx, m)
			cancel()
			q := msgRec(PhaseReturn, QueueKindNack, m)
			q.Outcome = outcomeOf(err)
			rec(q)
			if m.Key != "" {
				nacked[m.Key] = true
			}
			continue
		}
		ack = append(ack, m)
	}
	if len(ack) == 0 {
		return op
	}
	// An Ack whose outcome is unknown is tried again, as a careful application would
	// (a retried Ack of a recorded message returns nil; of a lost one, LockLost).
	for try := 0; try < 3; try++ {
		op++
		for _, m := range ack {
			rec(msgRec(PhaseCall, QueueKindAck, m))
		}
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := c.Ack(cctx, ack...)
		cancel()
		for _, m := range ack {
			q := msgRec(PhaseReturn, QueueKindAck, m)
			q.Outcome = outcomeOf(err)
			rec(q)
		}
		if outcomeOf(err) != Unknown {
			break
		}
	}
	return op
}
