package queue

// Acknowledgements: Ack, and whether the consumer still holds a delivery.
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - Ack returns nil only once every ack is in the offset record, written by one
//     conditional write per partition (commit.go; the partitions of one Ack in one
//     SQLite transaction, or at once on the other stores): a message whose Ack
//     returned nil is never delivered again to the group. TestAckFailsWhenTheWriteFails,
//     suite AcrossOwners/RebalanceKeepsAcksAboveANack. A write refused in that
//     transaction does not stop the others'. TestAckOfSeveralPartitionsIsOneTransaction.
//   - Acks above an un-acked message are persisted as Acked marks (commit.go,
//     snapshot). Suite AcrossOwners/RebalanceKeepsAcksAboveANack,
//     AcrossOwners/DeathKeepsAcksAndAttempts, AcrossOwners/MarksWindow.
//   - An Ack (or Extend, retry.go) of a delivery the consumer no longer holds
//     returns an error matching dcsync.ErrLockLost, so no message is both
//     dead-lettered and acked and no ack races a redelivery: its visibility
//     deadline passed (suite AcrossOwners/AckAfterDeadlineRefused), it was nacked or
//     delivered again (TestAckOfANackedOrRedeliveredMessageIsLockLost), it was
//     dead-lettered (suite AcrossOwners/DeadLetterAcrossOwners), its partition moved
//     (TestZombieAckRefusedAndEventsMove, suite Front/ZombieAck).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// ByPartition splits msgs by partition, in the order each partition first appears,
// keeping their order within each. Acking each part on its own tells which acks
// applied: an Ack error matching dcsync.ErrLockLost then concerns that partition only.
func ByPartition(msgs []*Message) [][]*Message {
	at := map[int]int{}
	var out [][]*Message
	for _, m := range msgs {
		i, ok := at[m.Partition]
		if !ok {
			i = len(out)
			at[m.Partition] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], m)
	}
	return out
}

// Ack acknowledges messages. It returns nil only once every ack is in the offset
// record: each partition's offset advances over its acked prefix, and acks above an
// un-acked message are recorded as marks, in one conditional write per partition (on
// SQLite, those of every partition in one transaction).
// It returns an error matching dcsync.ErrLockLost for messages the consumer no longer
// holds: of partitions it no longer owns (their events are, or will be, delivered to
// the new owner), and deliveries whose visibility deadline passed, that were nacked,
// delivered again or dead-lettered. The other messages' acks still apply.
func (c *Consumer) Ack(ctx context.Context, msgs ...*Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	byPart, pts, err := c.mark("queue.Ack", msgs)
	errs := []error{err}
	werrs := c.writeMany(ctx, pts, writeAck)
	for i, pt := range pts {
		werr := werrs[i]
		c.mu.Lock()
		recorded := true
		for _, en := range byPart[pt] {
			recorded = recorded && en.durable
		}
		if recorded {
			c.countAcks(ctx, byPart[pt])
		}
		c.mu.Unlock()
		if !recorded {
			if werr == nil {
				werr = driver.Errorf(dcsync.LockLost, "queue.Ack", "partition %d: the ack was not recorded", pt.p)
			}
			if errors.Is(werr, dcsync.ErrLockLost) {
				c.tel.ZombieAcks(ctx, len(byPart[pt]))
			}
			errs = append(errs, werr)
		}
	}
	return errors.Join(errs...)
}

// mark records acks in memory and returns the acked entries by partition.
func (c *Consumer) mark(op string, msgs []*Message) (map[*part][]*entry, []*part, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	byPart := map[*part][]*entry{}
	var pts []*part
	for _, m := range msgs {
		pt, en, err := c.holding(op, m, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		en.state = acked
		if byPart[pt] == nil {
			pts = append(pts, pt)
		}
		byPart[pt] = append(byPart[pt], en)
	}
	return byPart, pts, errors.Join(errs...)
}

// holding returns m's partition and entry when the consumer still holds m's delivery
// (in flight, before its deadline; or acked already by the application), an error
// matching dcsync.ErrLockLost otherwise (under c.mu).
func (c *Consumer) holding(op string, m *Message, now time.Time) (*part, *entry, error) {
	pt, err := c.owner(op, m)
	if err != nil {
		return nil, nil, err
	}
	en := m.en
	if en == nil || m.pt != pt {
		en = pt.at(m.Seq)
	}
	if en == nil || en.e.Seq != m.Seq {
		return nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "message %d/%d was not delivered by this consumer", m.Partition, m.Seq)
	}
	why := ""
	switch {
	case en.state == acked && en.deadLettered:
		why = "it was dead-lettered"
	case en.attempts != m.Attempt:
		why = fmt.Sprintf("it was delivered again (attempt %d)", en.attempts)
	case en.state == acked:
		return pt, en, nil // acked already
	case en.state == dead:
		why = "it reached the attempt limit and is being dead-lettered"
	case en.state == gone:
		why = "a Seek dropped it"
	case en.state != inflight:
		why = "it was nacked or its visibility deadline passed"
	case !now.Before(en.deadline):
		why = "its visibility deadline passed"
	default:
		return pt, en, nil
	}
	return nil, nil, driver.Errorf(dcsync.LockLost, op, "message %d/%d (attempt %d) is no longer held: %s", m.Partition, m.Seq, m.Attempt, why)
}

// countAcks records the acks of ens in the queue's metrics, each entry's once (an Ack
// of a message acked already counts nothing more). Under c.mu.
func (c *Consumer) countAcks(ctx context.Context, ens []*entry) {
	for _, en := range ens {
		if !en.ackCounted {
			en.ackCounted = true
			c.tel.Acked(ctx, en.deliveredAt)
		}
	}
}
