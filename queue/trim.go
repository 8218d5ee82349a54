package queue

// Retention: trimming the entries every group acked.
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - A trim stops below the lowest offset of every group. TestTrimFollowsTheSlowestGroup,
//     TestTrimPassCoversEveryPartition.
//   - A trim never undoes a rewind (a Seek back, a Reset, forced or not, of any group)
//     that returned before it raised the floor: the pass's below is an upper bound, and
//     the store trims no further than the offsets as they stand when it raises the
//     floor (driver.QueueStore.TrimQueue; docs/queue.md, "Trims never undo a rewind").
//     TestReviewTrimDoesNotUndoAReset, TestReviewTrimDoesNotUndoASeek,
//     TestReviewTrimDoesNotUndoAForcedReset; suite Queue/TrimHeldBack.
//   - Trims happen: a consumer that acks trims what every group acked, in every
//     partition it owns, within about one retention check period (one pass for all of
//     them). TestTrimPassCoversEveryPartition.
//   - With WithRetention, events enqueued within the retention are kept (Seek can
//     replay them). TestRetentionKeepsEventsForReplay.
//   - The groups are read before the offsets and again after: a group added
//     meanwhile stops the trim, so an event enqueued after AddGroup returned is never
//     trimmed before that group reads it. No test fails when only the second read is
//     removed (the race with AddGroup is not reached deterministically); suite
//     Front/AddGroupKeepsLaterEvents covers AddGroup without the race.
//
// Cost: one pass per consumer per retention check period at most (default 5 s), for
// all the partitions whose offset moved: two spec reads, one batched offsets read per
// other group, one batched bounds read, and one TrimQueue per partition with entries
// to delete. The rows deleted are the rows acked; a rarer pass deletes more of them at
// once, not fewer.

import (
	"context"
	"time"
)

// trimState is a consumer's trimming: one pass at a time (under c.mu).
type trimState struct {
	running bool
	last    time.Time // when the latest pass started
}

// trimJob is one partition of a pass: trim below next at most.
type trimJob struct {
	pt   *part
	next uint64
}

// maybeTrim starts a trim pass when pt's offset moved since its last trim and the
// last pass (or the first call) is at least the retention check period old: the pass covers every owned
// partition whose offset moved. Commits call it; so does the rebalance loop, for the
// trims a commit skipped.
func (c *Consumer) maybeTrim(pt *part) {
	c.mu.Lock()
	if c.trims.last.IsZero() {
		// The first pass one period after the consumer starts, as every later one:
		// the deletes of a period's acks go in one pass.
		c.trims.last = time.Now()
	}
	due := pt.next > pt.trimmedTo && !c.trims.running && !c.closing &&
		time.Since(c.trims.last) >= c.q.opts.retentionCheckPeriod
	var jobs []trimJob
	if due {
		for _, o := range c.owned {
			if o.next > o.trimmedTo {
				jobs = append(jobs, trimJob{o, o.next})
			}
		}
		c.trims.running, c.trims.last = true, time.Now()
		c.wg.Add(1)
	}
	c.mu.Unlock()
	if due {
		go c.trimPass(jobs)
	}
}

// trimPass deletes, in each partition of jobs, the entries that every group has acked.
func (c *Consumer) trimPass(jobs []trimJob) {
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		c.trims.running = false
		c.mu.Unlock()
	}()
	// Not c.bg: a trim started by the last Ack before Close still runs (Close waits).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps := make([]int, len(jobs))
	below := make([]uint64, len(jobs))
	for i, j := range jobs {
		ps[i], below[i] = j.pt.p, j.next
	}
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
			offs, err := c.q.store.ReadQueueOffsets(ctx, c.name, g, ps)
			if err != nil {
				return
			}
			for i := range below {
				below[i] = min(below[i], offs[i].Next)
			}
		}
		again, err := c.q.store.ReadQueueSpec(ctx, c.name)
		if err != nil || len(again.Groups) != len(spec.Groups) {
			return
		}
		c.q.spec.Store(&again)
	}
	bounds, err := c.q.store.QueueBounds(ctx, c.name, ps)
	if err != nil {
		return
	}
	for i, j := range jobs {
		if !c.trim(ctx, j.pt.p, bounds[i].Floor, below[i]) {
			continue
		}
		c.mu.Lock()
		j.pt.trimmedTo = max(j.pt.trimmedTo, j.next)
		c.mu.Unlock()
	}
}

// trim deletes partition p's entries from floor up to below (kept within the
// retention). It reports false when the trim failed (a later pass tries again).
func (c *Consumer) trim(ctx context.Context, p int, floor, below uint64) bool {
	if below <= floor {
		return true
	}
	if keep := c.q.opts.retention; keep > 0 {
		// Keep what was enqueued within the retention: stop below the first such event.
		cutoff := time.Now().Add(-keep)
		for from := floor; from < below; {
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
		if below <= floor {
			return true // kept for the retention; the next pass after the offset moves looks again
		}
	}
	if err := c.q.store.TrimQueue(ctx, c.name, p, below); err != nil {
		if ctx.Err() == nil {
			c.q.opts.log.Debug("queue: trim", "queue", c.name, "partition", p, "err", err)
		}
		return false
	}
	return true
}
