package queue

// The consumer, by job (one file each):
//
//	consumer.go    the Consumer type and its state (part, entry), Queue.Consumer and
//	               its options, the run loop, Close
//	members.go     membership: the member slots, read in one batched call
//	assign.go      assignment: which slot owns which partition
//	rebalance.go   joining; taking, draining, releasing partitions
//	deliver.go     Receive: what is handed out, and the writes before a delivery
//	prefetch.go    reading partitions into the buffers; waiting on the hub
//	hub.go         the hub: one watcher per queue and store value, shared by the
//	               process's consumers, that reads the bounds of every waited partition
//	               in one call per poll interval, backing off while nothing changes,
//	               and wakes the consumers behind
//	ack.go         Ack, and whether a delivery is still held
//	commit.go      the offset record: snapshots, conditional writes, Seek
//	retry.go       Nack, Extend, backoff, failed attempts
//	deadletter.go  dead-lettering at MaxAttempts
//	trim.go        trimming what every group acked
//	tx.go          AckTx
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - Close releases every partition it owns with its whole state written (see
//     rebalance.go, releaseAll) before it lets the lock go: deliveries in flight count
//     as failed attempts, Held is cleared. TestCloseRecordsDeliveriesInFlightAsFailed.
//   - A Receive waiting during Close, and every later Receive, returns ErrClosed.
//     Suite Front/Close.
//   - Close ends every goroutine the consumer started (the run loop, lease watchers,
//     prefetches, trims) and waits for them. TestNackDeadLetters (without the
//     cancel, Close never returns). That it waits, not only cancels, no test checks:
//     the goroutine checks (goleak, the suite's noQueueGoroutines) retry while
//     cancelled goroutines end.
//
// Buffered state (part, entry) changes only under c.mu; a partition's offset record
// is written by one writer at a time, under part.commitMu (see commit.go).

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/telemetry"
)

// ErrClosed is returned by a Consumer's methods after Close.
var ErrClosed = errors.New("queue: consumer closed")

// Message is one delivery of an event to a consumer.
type Message struct {
	// Partition and Seq locate the event in the queue.
	Partition int
	Seq       uint64
	// Key, ID and Payload are the event's.
	Key     string
	ID      string
	Payload []byte
	// At is when the event was enqueued, by the store's clock where it has one.
	At time.Time
	// Attempt is this delivery's number, from 1 (deliveries to consumers that died
	// holding the event count).
	Attempt int
	// Token is the fencing token of the partition's owner: greater than every earlier
	// owner's. Condition the application's own writes on it to refuse a stale owner's.
	Token uint64
	// Deadline is when the message becomes visible again unless acked or extended.
	Deadline time.Time
	// DeadFrom, on a dead-letter consumer, is where the event was when it was
	// dead-lettered ("partition/seq"); empty otherwise. ID is then the event's own id
	// (empty if it had none, or if with the origin it exceeded
	// driver.MaxQueueKeyLen).
	DeadFrom string

	// pt and en are the delivery's partition and entry: Ack, Nack and Extend judge the
	// delivery itself (it may have timed out, been delivered again or dead-lettered).
	pt *part
	en *entry
}

// CallOption configures one call of Queue.Consumer: the consumer it makes (dead letters
// or not, its prefetch). Options of the Queue itself, given to Create and Open, are
// Options, named WithX.
type CallOption func(*consumerOptions)

type consumerOptions struct {
	dead     bool
	prefetch int
}

// DeadLetters makes the consumer read the group's dead-letter partition instead of the
// queue's partitions. Its messages are never dead-lettered again.
func DeadLetters() CallOption { return func(o *consumerOptions) { o.dead = true } }

// Prefetch sets how many events per partition the consumer buffers ahead (default 512).
func Prefetch(n int) CallOption { return func(o *consumerOptions) { o.prefetch = n } }

// Consumer is one member of a consumer group. Its methods are safe for concurrent use.
type Consumer struct {
	q     *Queue
	group string
	gi    int
	name  string
	dead  bool
	parts []int // the partitions its group's members share
	co    consumerOptions
	tel   telemetry.QueueScope

	mu      sync.Mutex
	owned   map[int]*part
	waiting int
	pokeDue bool
	closing bool
	// gone: the queue this consumer was made for was deleted (and perhaps created
	// again): Receive returns it, and no partition is taken any more.
	gone   error
	wakeCh chan struct{}
	slot   int

	tick     chan struct{}
	hub      *hub
	bg       context.Context
	bgCancel context.CancelFunc
	wg       sync.WaitGroup
	fillMu   sync.Mutex
	rot      int
	trims    trimState // under mu (trim.go)
	// dropped are the locks of partitions dropped (drop) not yet freed, and dropping
	// whether a goroutine frees them (under mu): freed together, in one batched release
	// on a store with driver.LockMover.
	dropped  []*lock.Lock
	dropping bool

	// Membership as the run goroutine last read it (only it uses these): hi is one
	// past the highest occupied slot, view the occupied slots whose assignment is
	// assigned (computed with the consumer at viewSlot).
	hi         int
	memberKeys []dcsync.Key // memberKey(s) at index s, as far as read
	view       []int
	viewSlot   int
	assigned   map[int]bool
	// unsettled counts the rounds in a row whose view differed from the round's
	// before (see settleRounds).
	unsettled int
}

// Consumer joins group and returns a consumer that owns its share of the partitions as
// soon as it can take their locks. Close it to leave the group cleanly.
func (q *Queue) Consumer(ctx context.Context, group string, opts ...CallOption) (*Consumer, error) {
	spec, gi, err := q.group(ctx, group)
	if err != nil {
		return nil, err
	}
	co := consumerOptions{prefetch: 512}
	for _, o := range opts {
		o(&co)
	}
	if co.prefetch < 1 || co.prefetch > driver.MaxQueueBatch {
		return nil, driver.Errorf(dcsync.InvalidArgument, "queue.Consumer", "prefetch %d is outside [1, %d]", co.prefetch, driver.MaxQueueBatch)
	}
	c := &Consumer{q: q, group: group, gi: gi, name: spec.Name, dead: co.dead, co: co, tel: q.tel.ForGroup(group),
		owned: map[int]*part{}, wakeCh: make(chan struct{}, 1), tick: make(chan struct{}, 1), slot: -1, pokeDue: true}
	if co.dead {
		c.parts = []int{spec.Partitions + gi}
	} else {
		for p := 0; p < spec.Partitions; p++ {
			c.parts = append(c.parts, p)
		}
	}
	c.bg, c.bgCancel = context.WithCancel(context.Background())
	c.hub = subscribe(q.store, spec.Name, q.opts.pollInterval, c)
	c.wg.Add(1)
	go c.run()
	return c, nil
}

// part is an owned partition.
type part struct {
	p     int
	lk    *lock.Lock
	token uint64
	// next is the committed offset: buf[i] holds seq next+i.
	next uint64
	read uint64
	buf  []*entry
	head uint64
	// dirty: the partition may have events beyond read (or a hole to wait out).
	dirty bool
	// held: the offset record says Held for this token (written before the first
	// delivery, kept by commits while an event at the offset was delivered or the
	// partition is streaming, see streaming).
	held bool
	// clearing: a write that clears Held is under way; nothing is delivered until the
	// record says Held again.
	clearing bool
	// init: the stored state of entries not read yet (seq >= read), sorted by Seq: the
	// attempts of the entry at the claimed offset and the claimed Marks.
	init []driver.QueueMark
	// version: the Version of the latest write of the record (or of the claimed one);
	// last: the record as stored, when known (Version left out).
	version   uint64
	last      driver.QueueOffset
	known     bool
	draining  bool
	holeSeq   uint64
	holeSince time.Time
	// commitMu serializes the writes of the offset record, each with the next Version.
	commitMu  sync.Mutex
	trimmedTo uint64 // the offset up to which the latest trim of the partition went (trim.go)
}

// Entry states.
const (
	pending  = iota // waiting for its (next) delivery
	inflight        // delivered, not acked, nacked or timed out yet
	acked           // acked by the application, aborted, or dead-lettered
	dead            // reached MaxAttempts (recorded in the offset): being dead-lettered
	gone            // dropped from the buffer by a Seek: its deliveries can no longer be acked
)

type entry struct {
	e     driver.QueueEntry
	state int
	// attempts counts the entry's failed deliveries, plus the one in flight (state
	// inflight): the Attempt of its latest delivery.
	attempts int
	// loaded: the failed attempts stored for it when this owner read it.
	loaded int
	// persisted: the failed attempts the offset record holds for it.
	persisted int
	// durable: the record holds its ack (Next is above it, or an Acked mark).
	durable bool
	// busy: an append of it to the dead-letter partition is under way.
	busy bool
	// deadLettered: acked by dead-lettering, not by the application.
	deadLettered bool
	deadline     time.Time
	notBefore    time.Time
	// deliveredAt: when its latest delivery was handed out (the receive-to-ack metric).
	deliveredAt time.Time
	// ackCounted: its ack is counted in the queue's metrics.
	ackCounted bool
}

func (c *Consumer) signal() {
	select {
	case c.wakeCh <- struct{}{}:
	default:
	}
}

// Partitions returns the partitions the consumer owns now, in order.
func (c *Consumer) Partitions() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int, 0, len(c.owned))
	for p, pt := range c.owned {
		if !pt.draining {
			out = append(out, p)
		}
	}
	sort.Ints(out)
	return out
}

// run keeps a member slot and the partitions assigned to the consumer.
func (c *Consumer) run() {
	defer c.wg.Done()
	o := c.q.opts
	// Membership is read every poll interval: a member that joins is seen, and handed
	// its share, within about one. On a store without driver.LockBatcher a read costs
	// one call per slot read: there, while nothing is under way, the reads back off,
	// doubling up to idleBackoff intervals.
	period := min(o.pollInterval, o.lease/3)
	_, batching := c.q.store.(driver.LockBatcher)
	longest := max(period, min(idleBackoff*o.pollInterval, o.lease/3))
	wait := period
	for c.bg.Err() == nil {
		member, lost := c.join()
		if member == nil {
			return
		}
		rejoin := false
		for c.bg.Err() == nil && lost.Err() == nil && !rejoin {
			var busy bool
			busy, rejoin = c.rebalance(c.bg)
			if rejoin {
				break
			}
			if batching || busy {
				wait = period
			} else {
				wait = min(2*wait, longest)
			}
			select {
			case <-c.bg.Done():
			case <-lost.Done():
			case <-c.tick:
			case <-time.After(jitter(wait)):
			}
		}
		c.mu.Lock()
		slot := c.slot
		c.mu.Unlock()
		if c.bg.Err() != nil || rejoin {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = member.Release(rctx)
			cancel()
			c.unmarkSlot(slot)
			if rejoin {
				o.log.Debug("queue: moving to a lower member slot", "queue", c.name, "group", c.group)
				continue
			}
			return
		}
		c.unmarkSlot(slot)
		o.log.Warn("queue: consumer lost its member slot; rejoining", "queue", c.name, "group", c.group)
		// Its lease lapsed (a pause, a cut-off): let a waiting consumer have the slot
		// first rather than race it at once.
		select {
		case <-c.bg.Done():
		case <-time.After(time.Duration(rand.Int64N(int64(o.lease/3) + 1))):
		}
	}
}

func jitter(d time.Duration) time.Duration {
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// Close leaves the group: it releases the consumer's partitions (recording its acks
// and attempts; unacked messages are delivered to the next owner, those in flight as
// a failed attempt) and its member slot. Receives waiting on it return ErrClosed.
func (c *Consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil
	}
	c.closing = true
	pts := make([]*part, 0, len(c.owned))
	for _, pt := range c.owned {
		pts = append(pts, pt)
	}
	c.mu.Unlock()
	c.bgCancel()
	c.hub.unsubscribe(c)
	c.signal()
	c.releaseAll(ctx, pts)
	c.wg.Wait()
	return nil
}

// owner returns the owned partition of m, checking m's token; LockLost otherwise.
func (c *Consumer) owner(op string, m *Message) (*part, error) {
	if m == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "message is nil")
	}
	if c.closing {
		return nil, ErrClosed
	}
	pt := c.owned[m.Partition]
	if pt == nil || pt.token != m.Token {
		return nil, driver.Errorf(dcsync.LockLost, op, "partition %d (token %d) is no longer owned by this consumer", m.Partition, m.Token)
	}
	return pt, nil
}

func (pt *part) at(seq uint64) *entry {
	if seq < pt.next || seq-pt.next >= uint64(len(pt.buf)) {
		return nil
	}
	return pt.buf[seq-pt.next]
}
