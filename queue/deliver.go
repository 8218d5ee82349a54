package queue

// Delivery: Receive, and which buffered entries it hands out.
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - Nothing is handed out from a partition that is draining.
//     TestDrainingHandsOutNothingAndWaitsForAcks. Nor from one whose lease is over
//     (its successor may be delivering the same events): no test fails when only
//     this check is removed (the lease watcher drops the partition soon after; the
//     window is not reached deterministically).
//   - The offset record says Held (a fenced write) before the first delivery from a
//     partition, so that a death with a delivery in flight costs that event an
//     attempt. TestDeathsCountAsAttempts.
//   - A failed attempt by a visibility timeout (a Nack records its own, retry.go) is
//     recorded in the offset before the entry is delivered again or dead-lettered,
//     so MaxAttempts counts the same deliveries whoever made them. Suite
//     AcrossOwners/VisibilityAttemptsSurviveAMove.
//   - An entry whose recorded attempts reached MaxAttempts is never delivered: it
//     is dead-lettered (deadletter.go). TestDeathsCountAsAttempts, suite
//     AcrossOwners/DeadLetterCompletedBySuccessor, AcrossOwners/FencedDeadLetter.
//   - Per-key order: an entry is not handed out while an earlier entry of its key is
//     in flight from an earlier Receive, waiting for a retry, or being dead-lettered.
//     TestKeyOrderHoldsAcrossReceives.

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Receive returns up to n messages, blocking until at least one is available, ctx
// ends (its error) or the consumer closes (ErrClosed).
func (c *Consumer) Receive(ctx context.Context, n int) ([]*Message, error) {
	if n < 1 || n > driver.MaxQueueBatch {
		return nil, driver.Errorf(dcsync.InvalidArgument, "queue.Receive", "max %d is outside [1, %d]", n, driver.MaxQueueBatch)
	}
	for {
		now := time.Now()
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if c.gone != nil && len(c.owned) == 0 {
			err := c.gone
			c.mu.Unlock()
			return nil, err
		}
		msgs, dead, pre, wake := c.collect(n, now)
		c.mu.Unlock()
		if len(pre) > 0 {
			err := c.prepare(ctx, pre)
			if len(msgs) == 0 && len(dead) == 0 {
				if err == nil {
					continue
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				c.q.opts.log.Debug("queue: writing offsets before delivery", "queue", c.name, "err", err)
			}
		}
		if len(dead) > 0 {
			// msgs are in flight already: hand them out even if dead-lettering fails
			// (it is retried on a later Receive).
			if err := c.deadLetter(ctx, dead); err != nil && ctx.Err() != nil && len(msgs) == 0 {
				return nil, ctx.Err()
			}
		}
		if len(msgs) > 0 {
			c.mu.Lock()
			c.pokeDue = true
			c.mu.Unlock()
			c.prefetch()
			return msgs, nil
		}
		filled, err := c.fill(ctx)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if filled {
			continue
		}
		d := c.q.opts.pollInterval
		if !wake.IsZero() {
			d = min(d, time.Until(wake))
		}
		c.mu.Lock()
		c.waiting++
		// Ask the hub for a read now only when this consumer was busy since its last
		// wait (or never waited): idle consumers leave the hub at one read per interval,
		// however many there are.
		poke := c.pokeDue
		c.pokeDue = false
		c.mu.Unlock()
		if poke {
			c.hub.poke()
		}
		t := time.NewTimer(max(d, time.Millisecond))
		select {
		case <-ctx.Done():
		case <-c.wakeCh:
		case <-t.C:
		}
		t.Stop()
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// collect hands out up to n messages (under c.mu). It returns the entries to
// dead-letter (their attempts, recorded, reached the limit), the partitions whose
// offset must be written before they deliver (to mark them Held, or to record failed
// attempts of entries about to be delivered again), and the earliest time a waiting
// entry becomes deliverable.
func (c *Consumer) collect(n int, now time.Time) (msgs []*Message, doomed []deadRef, pre []*part, wake time.Time) {
	ps := make([]*part, 0, len(c.owned))
	for _, pt := range c.owned {
		ps = append(ps, pt)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].p < ps[j].p })
	c.rot++
	note := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	for k := range ps {
		pt := ps[(k+c.rot)%len(ps)]
		if pt.draining || !pt.lk.Held() {
			// A partition whose lease is over hands nothing out (its successor may be
			// delivering the same events); it is dropped once the lock says it is lost.
			continue
		}
		needWrite := false
		write := func() {
			if !needWrite {
				needWrite = true
				pre = append(pre, pt)
			}
		}
		blocked := map[string]bool{}
		batch := map[*entry]bool{}
		block := func(key string) {
			if key != "" {
				blocked[key] = true
			}
		}
		for _, en := range pt.buf {
			switch en.state {
			case acked:
				continue
			case dead:
				block(en.e.Key)
				if en.busy {
					continue
				}
				if en.notBefore.After(now) {
					note(en.notBefore)
					continue
				}
				en.busy = true
				doomed = append(doomed, deadRef{pt, en})
				continue
			case inflight:
				if now.Before(en.deadline) {
					if !batch[en] {
						block(en.e.Key)
					}
					note(en.deadline)
					continue
				}
				en.state = pending // visibility timeout: a failed attempt; deliver again
				en.notBefore = now
			}
			if en.attempts > en.persisted {
				// A failed attempt not recorded yet: record it before the entry is
				// delivered again (or dead-lettered), so that MaxAttempts counts it
				// whoever owns the partition next.
				block(en.e.Key)
				write()
				continue
			}
			if !c.dead && en.attempts >= c.q.opts.maxAttempts {
				// The record says it reached the limit: dead-letter it, never deliver.
				en.state, en.busy = dead, true
				doomed = append(doomed, deadRef{pt, en})
				block(en.e.Key)
				continue
			}
			if en.notBefore.After(now) {
				block(en.e.Key)
				note(en.notBefore)
				continue
			}
			if en.e.Key != "" && blocked[en.e.Key] {
				continue
			}
			if !pt.held || pt.clearing {
				write() // deliver once the offset says held
				continue
			}
			// Not blocked: later events of the key may follow in this same batch, in
			// order (Nack sends them back with it).
			en.state = inflight
			en.attempts++
			en.deadline = now.Add(c.q.opts.visibility)
			note(en.deadline)
			batch[en] = true
			msgs = append(msgs, c.message(pt, en))
			if len(msgs) == n {
				return msgs, doomed, pre, wake
			}
		}
	}
	return msgs, doomed, pre, wake
}

// prepare writes the offset of each partition before it delivers from it: marked
// held by this consumer's token, so that a successor counts a failed attempt if it
// dies with a delivery in flight, and with every failed attempt recorded. One write
// per partition per claim (and again after commits left nothing delivered at the
// offset, or after a visibility timeout); the partitions of one Receive are written
// together (writeMany: one SQLite transaction, or at once).
func (c *Consumer) prepare(ctx context.Context, pts []*part) error {
	return errors.Join(c.writeMany(ctx, pts, writeHeld)...)
}

func (c *Consumer) message(pt *part, en *entry) *Message {
	en.deliveredAt = time.Now()
	c.tel.Received(context.Background(), en.attempts, en.e.At)
	m := &Message{Partition: pt.p, Seq: en.e.Seq, Key: en.e.Key, ID: en.e.ID,
		Payload: en.e.Payload, At: en.e.At, Attempt: en.attempts, Token: pt.token, Deadline: en.deadline,
		pt: pt, en: en}
	if c.dead {
		if from, orig, ok := parseDeadID(en.e.ID); ok {
			m.DeadFrom, m.ID = from, orig
		}
	}
	return m
}
