package queue

// Retries: Nack (backoff, attempts, dead-lettering at MaxAttempts), Extend, and
// which attempts of an entry count as failed.
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - Nack returns only once the failed attempt is in the offset record (one write),
//     so that it counts whoever owns the partition next. Suite
//     AcrossOwners/DeathKeepsAcksAndAttempts.
//   - A Nack sends the later in-flight messages of its key back with it, without
//     counting an attempt against them. TestNackKeepsKeyOrder.
//   - A Nack dead-letters its message only once a fenced write recorded that it
//     reached MaxAttempts: an owner whose write is refused appends nothing (with
//     deadLetter's own check, deadletter.go). Suite AcrossOwners/FencedDeadLetter.
//   - Extend moves only the deadline of a delivery still held (ack.go, holding).
//     Suite AcrossOwners/AckAfterDeadlineRefused.
//   - A release counts deliveries in flight as failed attempts (failed(true)).
//     TestCloseRecordsDeliveriesInFlightAsFailed.

import (
	"context"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// failed returns the failed attempts of en to record; final counts a delivery in
// flight as failed (the owner is letting the partition go).
func (en *entry) failed(final bool) int {
	switch en.state {
	case inflight:
		if final {
			return en.attempts
		}
		return en.attempts - 1
	case pending, dead:
		return en.attempts
	}
	return 0
}

// Nack asks for m to be delivered again after a backoff that doubles with each
// attempt. It returns once the failed attempt is recorded in the offset (one write),
// so that it counts whoever owns the partition next. A message that had MaxAttempts
// deliveries goes to the dead-letter partition instead (Nack returns once it is
// there). A Nack of a delivery the consumer no longer holds (acked, timed out and
// delivered again) does nothing; of a partition it no longer owns, it returns an error
// matching dcsync.ErrLockLost.
func (c *Consumer) Nack(ctx context.Context, m *Message) error {
	c.mu.Lock()
	pt, err := c.owner("queue.Nack", m)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	en := m.en
	if en == nil || m.pt != pt {
		en = pt.at(m.Seq)
	}
	if en == nil || en.state != inflight || en.attempts != m.Attempt {
		c.mu.Unlock()
		return nil
	}
	o := c.q.opts
	notBefore := time.Now().Add(o.backoff(en.attempts))
	if en.e.Key != "" {
		// Later in-flight events of the key go back too, undelivered, to keep order.
		for _, later := range pt.buf[m.Seq-pt.next+1:] {
			if later.e.Key == en.e.Key && later.state == inflight {
				later.state, later.notBefore = pending, notBefore
				later.attempts--
			}
		}
	}
	en.state, en.notBefore = pending, notBefore
	c.mu.Unlock()
	c.tel.Nacked(ctx, 1)
	c.signal()
	if err := c.write(ctx, pt, writeAck); err != nil {
		return err
	}
	if c.dead || en.attempts < o.maxAttempts {
		return nil
	}
	// The record says the entry reached the limit (a fenced write): dead-letter it.
	c.mu.Lock()
	mine := en.state == pending && en.persisted >= o.maxAttempts
	if mine {
		en.state, en.busy = dead, true
	}
	c.mu.Unlock()
	if !mine {
		return nil // a Receive is dead-lettering it
	}
	return c.deadLetter(ctx, []deadRef{{pt, en}})
}

// Extend moves m's visibility deadline to d from now. It returns an error matching
// dcsync.ErrLockLost when the consumer no longer holds m (see Ack).
func (c *Consumer) Extend(ctx context.Context, m *Message, d time.Duration) error {
	if d <= 0 {
		return driver.Errorf(dcsync.InvalidArgument, "queue.Extend", "extension %v must be positive", d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, en, err := c.holding("queue.Extend", m, time.Now())
	if err != nil {
		return err
	}
	if en.state != inflight {
		return driver.Errorf(dcsync.InvalidArgument, "queue.Extend", "message %d/%d is not in flight", m.Partition, m.Seq)
	}
	en.deadline = time.Now().Add(d)
	m.Deadline = en.deadline
	return nil
}

// backoff is the wait before the retry of a delivery nacked at attempt: the minimum
// backoff, doubled with each attempt after the first, at most the maximum.
func (o *options) backoff(attempt int) time.Duration {
	back := o.minBackoff
	for i := 1; i < attempt && back < o.maxBackoff; i++ {
		back *= 2
	}
	return min(back, o.maxBackoff)
}
