package queue

// Dead-lettering: moving an entry that reached MaxAttempts to its group's
// dead-letter partition.
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - Only entries whose attempts, as recorded by a fenced write, reached MaxAttempts
//     are appended, and only by an owner that still owns the partition: a zombie
//     appends nothing. Suite AcrossOwners/FencedDeadLetter, with Nack's check
//     (retry.go) broken too: either check alone keeps the case passing.
//   - Each is appended with the id reserved for (group, partition, seq), so an append
//     by this owner or a successor (after a crash between the append and the ack)
//     lands once. Suite AcrossOwners/DeadLetterCompletedBySuccessor.
//   - It is then acked by one write per partition, as dead-lettered: never delivered
//     again, and an Ack of its last delivery returns LockLost. Suite
//     AcrossOwners/DeadLetterAcrossOwners.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

type deadRef struct {
	pt *part
	en *entry
}

// deadID is the idempotency id of a dead-lettered event: unique per (group,
// partition, seq), so that dead-lettering it again (by a successor) appends it once.
// The event's own id follows when it fits in driver.MaxQueueKeyLen.
func deadID(group string, p int, seq uint64, orig string) string {
	id := "\x00dead\x00" + strconv.Itoa(p) + "/" + strconv.FormatUint(seq, 10) + "\x00" + strconv.Itoa(len(group)) + ":" + group
	if len(id)+len(orig) < driver.MaxQueueKeyLen {
		id += "\x00" + orig
	}
	return id
}

// parseDeadID returns the origin ("partition/seq") and the original id of a
// dead-letter id.
func parseDeadID(id string) (from, orig string, ok bool) {
	const pre = "\x00dead\x00"
	rest, found := strings.CutPrefix(id, pre)
	if !found {
		return "", "", false
	}
	from, rest, found = strings.Cut(rest, "\x00")
	if !found {
		return "", "", false
	}
	n, rest, found := strings.Cut(rest, ":")
	gl, err := strconv.Atoi(n)
	if !found || err != nil || gl > len(rest) {
		return "", "", false
	}
	rest = rest[gl:]
	if r, cut := strings.CutPrefix(rest, "\x00"); cut {
		orig = r
	}
	return from, orig, true
}

// deadLetter completes the dead-lettering of entries whose attempts, as recorded in
// the offset by a fenced write, reached MaxAttempts (state dead, busy): it appends
// them to the group's dead-letter partition, each with its reserved id (so an append
// by this owner or any later one lands once), then acks them with one write per
// partition. An owner that finds such an entry recorded does the same: a crash
// between the append and the ack is completed by the next owner. A consumer that no
// longer owns the partition appends nothing.
func (c *Consumer) deadLetter(ctx context.Context, refs []deadRef) error {
	spec := c.q.Spec()
	var events []driver.QueueEvent
	var live []deadRef
	c.mu.Lock()
	for _, r := range refs {
		if c.owned[r.pt.p] != r.pt || r.en.persisted < c.q.opts.maxAttempts {
			r.en.busy = false
			continue
		}
		live = append(live, r)
		events = append(events, driver.QueueEvent{Partition: spec.Partitions + c.gi, Key: r.en.e.Key,
			ID: deadID(c.group, r.pt.p, r.en.e.Seq, r.en.e.ID), Payload: r.en.e.Payload})
	}
	c.mu.Unlock()
	if len(live) == 0 {
		return driver.Errorf(dcsync.LockLost, "queue.deadLetter", "the partitions are no longer owned by this consumer")
	}
	if _, err := c.q.append(ctx, events); err != nil {
		c.mu.Lock()
		for _, r := range live {
			r.en.busy, r.en.notBefore = false, time.Now().Add(c.q.opts.minBackoff)
		}
		c.mu.Unlock()
		c.signal()
		c.q.opts.log.Warn("queue: dead-lettering failed; will retry", "queue", c.name, "group", c.group, "err", err)
		return err
	}
	c.q.opts.log.Info("queue: dead-lettered", "queue", c.name, "group", c.group, "events", len(live))
	c.tel.DeadLettered(ctx, len(live))
	var pts []*part
	c.mu.Lock()
	for _, r := range live {
		r.en.state, r.en.deadLettered, r.en.busy = acked, true, false
		if !slices.Contains(pts, r.pt) {
			pts = append(pts, r.pt)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, pt := range pts {
		errs = append(errs, c.write(ctx, pt, writeAck))
	}
	return errors.Join(errs...)
}
