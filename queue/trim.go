package queue

// Retention: trimming the entries every group acked.
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - A trim stops below the lowest offset of every group. TestTrimFollowsTheSlowestGroup.
//   - With WithRetention, events enqueued within the retention are kept (Seek can
//     replay them). TestRetentionKeepsEventsForReplay.
//   - The groups are read before the offsets and again after: a group added
//     meanwhile stops the trim, so an event enqueued after AddGroup returned is never
//     trimmed before that group reads it. No test fails when only the second read is
//     removed (the race with AddGroup is not reached deterministically); suite
//     Front/AddGroupKeepsLaterEvents covers AddGroup without the race.

import (
	"context"
	"time"
)

// maybeTrim starts a trim of pt when its offset moved since the last one and the
// last one is at least the retention check period old. Commits call it; so does the
// rebalance loop, for the trims a commit skipped.
func (c *Consumer) maybeTrim(pt *part) {
	c.mu.Lock()
	next := pt.next
	due := next > pt.trimmedTo && time.Since(pt.lastTrim) >= c.q.opts.retentionCheckPeriod && !c.closing
	if due {
		pt.lastTrim, pt.trimmedTo = time.Now(), next
		c.wg.Add(1)
	}
	c.mu.Unlock()
	if due {
		go c.trim(pt.p, next)
	}
}

// trim deletes partition p's entries that every group has acked.
func (c *Consumer) trim(p int, next uint64) {
	defer c.wg.Done()
	// Not c.bg: a trim started by the last Ack before Close still runs (Close waits).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	below := next
	if !c.dead {
		// The groups are read fresh before the offsets, and again after: a group added
		// meanwhile (by another process) stops this trim, so an event enqueued after
		// AddGroup returned is never trimmed before the new group reads it (it is above
		// every offset read here).
		spec, err := c.q.store.ReadQueueSpec(ctx, c.name)
		if err != nil {
			return
		}
		for _, g := range spec.Groups {
			if g == c.group {
				continue
			}
			offs, err := c.q.store.ReadQueueOffsets(ctx, c.name, g, []int{p})
			if err != nil {
				return
			}
			below = min(below, offs[0].Next)
		}
		again, err := c.q.store.ReadQueueSpec(ctx, c.name)
		if err != nil || len(again.Groups) != len(spec.Groups) {
			return
		}
		c.q.spec.Store(&again)
	}
	b, err := c.q.store.QueueBounds(ctx, c.name, []int{p})
	if err != nil || below <= b[0].Floor {
		return
	}
	if keep := c.q.opts.retention; keep > 0 {
		// Keep what was enqueued within the retention: stop below the first such event.
		cutoff := time.Now().Add(-keep)
		for from := b[0].Floor; from < below; {
			r, err := c.q.store.ReadQueue(ctx, c.name, p, from, int(min(below-from, 500)))
			if err != nil || len(r.Entries) == 0 {
				below = from
				break
			}
			for _, e := range r.Entries {
				if e.Seq >= below || !e.Aborted && e.At.After(cutoff) {
					below = min(below, e.Seq)
					break
				}
			}
			from = r.Entries[len(r.Entries)-1].Seq + 1
		}
		if below <= b[0].Floor {
			return
		}
	}
	if err := c.q.store.TrimQueue(ctx, c.name, p, below); err != nil && ctx.Err() == nil {
		c.q.opts.log.Debug("queue: trim", "queue", c.name, "partition", p, "err", err)
	}
}
