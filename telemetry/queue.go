package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Queue metrics. Package queue records, per store, queue and consumer group:
//
//	dcsync.queue.enqueued                     counter        {event}     store, queue
//	dcsync.queue.received                     counter        {message}   store, queue, group
//	dcsync.queue.redelivered                  counter        {message}   store, queue, group
//	dcsync.queue.acked                        counter        {message}   store, queue, group
//	dcsync.queue.nacked                       counter        {message}   store, queue, group
//	dcsync.queue.dead_lettered                counter        {message}   store, queue, group
//	dcsync.queue.zombie_acks                  counter        {message}   store, queue, group
//	dcsync.queue.enqueue_to_receive.duration  histogram      s           store, queue, group
//	dcsync.queue.receive_to_ack.duration      histogram      s           store, queue, group
//	dcsync.queue.partitions.owned             up-down count  {partition} store, queue, group
//	dcsync.queue.rebalances                   counter        {rebalance} store, queue, group
//
// received counts every delivery, redelivered those after the first attempt (a
// visibility timeout, a Nack, a consumer that died holding it). acked counts messages
// whose Ack returned nil, zombie_acks those refused because another consumer owns the
// partition now (LockLost: the ack was not recorded and the message will be delivered
// to the owner). dead_lettered counts messages moved to the group's dead letters.
// enqueue_to_receive is from the event's enqueue time (the producer's clock) to its
// delivery; receive_to_ack from the delivery to the Ack that recorded it.
// partitions.owned is the partitions this process's consumers own; rebalances counts
// each new view a consumer takes of its group's members (its first, then every join
// and leave it sees), from which it computes its assignment again. Queue and group names are the application's
// own (bounded) names; nothing per event is an attribute.

// Metric names of the queue.
const (
	MetricQueueEnqueued         = "dcsync.queue.enqueued"
	MetricQueueReceived         = "dcsync.queue.received"
	MetricQueueRedelivered      = "dcsync.queue.redelivered"
	MetricQueueAcked            = "dcsync.queue.acked"
	MetricQueueNacked           = "dcsync.queue.nacked"
	MetricQueueDeadLettered     = "dcsync.queue.dead_lettered"
	MetricQueueZombieAcks       = "dcsync.queue.zombie_acks"
	MetricQueueEnqueueToReceive = "dcsync.queue.enqueue_to_receive.duration"
	MetricQueueReceiveToAck     = "dcsync.queue.receive_to_ack.duration"
	MetricQueueOwned            = "dcsync.queue.partitions.owned"
	MetricQueueRebalances       = "dcsync.queue.rebalances"
)

// Attribute keys of the queue metrics.
const (
	AttrQueue = "dcsync.queue"
	AttrGroup = "dcsync.group"
)

type queueInstruments struct {
	enqueued, received, redelivered, acked, nacked, deadLettered, zombieAcks, rebalances metric.Int64Counter
	enqueueToReceive, receiveToAck                                                       metric.Float64Histogram
	owned                                                                                metric.Int64UpDownCounter
}

func newQueueInstruments(m metric.Meter) queueInstruments {
	var q queueInstruments
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, _ := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	q.enqueued = counter(MetricQueueEnqueued, "{event}", "Events appended to a queue (duplicates of an event id not counted).")
	q.received = counter(MetricQueueReceived, "{message}", "Messages delivered to a consumer, redeliveries included.")
	q.redelivered = counter(MetricQueueRedelivered, "{message}", "Deliveries after the first attempt.")
	q.acked = counter(MetricQueueAcked, "{message}", "Messages whose Ack was recorded.")
	q.nacked = counter(MetricQueueNacked, "{message}", "Messages Nacked for a retry.")
	q.deadLettered = counter(MetricQueueDeadLettered, "{message}", "Messages moved to the group's dead letters.")
	q.zombieAcks = counter(MetricQueueZombieAcks, "{message}", "Acks refused because another consumer owns the partition now.")
	q.rebalances = counter(MetricQueueRebalances, "{rebalance}", "Changes of a consumer's partition assignment.")
	q.enqueueToReceive, _ = m.Float64Histogram(MetricQueueEnqueueToReceive, metric.WithUnit("s"), secondsBuckets,
		metric.WithDescription("Time from an event's enqueue to its delivery."))
	q.receiveToAck, _ = m.Float64Histogram(MetricQueueReceiveToAck, metric.WithUnit("s"), secondsBuckets,
		metric.WithDescription("Time from a delivery to the Ack that recorded it."))
	q.owned, _ = m.Int64UpDownCounter(MetricQueueOwned, metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions this process's consumers own."))
	return q
}

// QueueScope is what a queue records its metrics under: its instruments, its store's
// kind, the queue's name and (for consumers) the group. A zero QueueScope records
// nothing.
type QueueScope struct {
	In    *Instruments
	Store string
	Queue string
	Group string
}

// ForGroup returns the scope of group on the same queue.
func (s QueueScope) ForGroup(group string) QueueScope { s.Group = group; return s }

// off reports a zero QueueScope (no instruments): it records nothing.
func (s QueueScope) off() bool { return s.In == nil }

func (s QueueScope) opt() metric.MeasurementOption {
	return s.In.set(attrs{store: s.Store, queue: s.Queue, group: s.Group})
}

// Enqueued records n events appended.
func (s QueueScope) Enqueued(ctx context.Context, n int) {
	if s.off() {
		return
	}
	if n > 0 && s.In.queue.enqueued.Enabled(ctx) {
		s.In.queue.enqueued.Add(ctx, int64(n), s.opt())
	}
}

// Received records one delivery of attempt (1 for the first), enqueued at enqueuedAt
// (zero: unknown).
func (s QueueScope) Received(ctx context.Context, attempt int, enqueuedAt time.Time) {
	if s.off() {
		return
	}
	q := &s.In.queue
	if q.received.Enabled(ctx) {
		q.received.Add(ctx, 1, s.opt())
	}
	if attempt > 1 && q.redelivered.Enabled(ctx) {
		q.redelivered.Add(ctx, 1, s.opt())
	}
	if !enqueuedAt.IsZero() && q.enqueueToReceive.Enabled(ctx) {
		q.enqueueToReceive.Record(ctx, max(time.Since(enqueuedAt), 0).Seconds(), s.opt())
	}
}

// Acked records one message whose Ack was recorded, delivered at receivedAt.
func (s QueueScope) Acked(ctx context.Context, receivedAt time.Time) {
	if s.off() {
		return
	}
	q := &s.In.queue
	if q.acked.Enabled(ctx) {
		q.acked.Add(ctx, 1, s.opt())
	}
	if !receivedAt.IsZero() && q.receiveToAck.Enabled(ctx) {
		q.receiveToAck.Record(ctx, max(time.Since(receivedAt), 0).Seconds(), s.opt())
	}
}

// ZombieAcks records n acks refused because another consumer owns the partition.
func (s QueueScope) ZombieAcks(ctx context.Context, n int) {
	if s.off() {
		return
	}
	if n > 0 && s.In.queue.zombieAcks.Enabled(ctx) {
		s.In.queue.zombieAcks.Add(ctx, int64(n), s.opt())
	}
}

// Nacked records n messages Nacked.
func (s QueueScope) Nacked(ctx context.Context, n int) {
	if s.off() {
		return
	}
	if n > 0 && s.In.queue.nacked.Enabled(ctx) {
		s.In.queue.nacked.Add(ctx, int64(n), s.opt())
	}
}

// DeadLettered records n messages moved to the dead letters.
func (s QueueScope) DeadLettered(ctx context.Context, n int) {
	if s.off() {
		return
	}
	if n > 0 && s.In.queue.deadLettered.Enabled(ctx) {
		s.In.queue.deadLettered.Add(ctx, int64(n), s.opt())
	}
}

// Owned records a change of delta in the partitions this process's consumers own.
func (s QueueScope) Owned(ctx context.Context, delta int) {
	if s.off() {
		return
	}
	if delta != 0 && s.In.queue.owned.Enabled(ctx) {
		s.In.queue.owned.Add(ctx, int64(delta), s.opt())
	}
}

// Rebalanced records one change of a consumer's assignment.
func (s QueueScope) Rebalanced(ctx context.Context) {
	if s.off() {
		return
	}
	if s.In.queue.rebalances.Enabled(ctx) {
		s.In.queue.rebalances.Add(ctx, 1, s.opt())
	}
}
