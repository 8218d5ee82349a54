package queue

// Reading partitions into the consumer's buffers, ahead of Receive, and the hub's
// wake-ups when events arrive.
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - An entry read gets the state its offset record holds for it: an Acked mark
//     makes it acked and durable (never delivered again), and its recorded failed
//     attempts are its count so far. Suite AcrossOwners/RebalanceKeepsAcksAboveANack.
//   - No entry more than driver.MaxQueueMarks above the committed offset is ever
//     buffered (capacity), so the acks above an un-acked entry always fit in the
//     record's Marks. Suite AcrossOwners/MarksWindow.
//
// Entries are buffered in seq order with no gap: a read stops at a hole, which is
// tombstoned (AbortQueueSeq, if absent) only after the hole timeout; aborted entries
// are acked, never delivered. (The stores' side of holes is the suite's Abort case;
// no consumer test makes a hole.)

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// readers bounds the partitions one consumer reads at once on a store without
// driver.QueueBatchReader (one with it gets one ReadQueues call for them all).
const readers = 8

// fill reads the dirty partitions that have room in their buffers. It reports whether
// it buffered anything new.
func (c *Consumer) fill(ctx context.Context) (bool, error) {
	c.fillMu.Lock()
	defer c.fillMu.Unlock()
	return c.fillLocked(ctx)
}

// capacity is how many entries a partition buffers: the Prefetch option, clamped so
// that no entry more than driver.MaxQueueMarks above the committed offset is ever
// delivered, and the offset's Marks always fit.
func (c *Consumer) capacity() int { return min(c.co.prefetch, driver.MaxQueueMarks+1) }

// prefetch refills, in the background, the partitions whose buffers ran below half
// while the application works on what Receive returned: the next Receive then finds
// events buffered instead of waiting for a read. At most one fill runs at a time.
func (c *Consumer) prefetch() {
	c.mu.Lock()
	low := false
	for _, pt := range c.owned {
		if pt.dirty && !pt.draining && len(pt.buf) < c.capacity()/2 {
			low = true
			break
		}
	}
	if !low || c.closing || !c.fillMu.TryLock() {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1) // under c.mu, before Close can wait
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		got, _ := c.fillLocked(c.bg)
		c.fillMu.Unlock()
		if got {
			c.signal()
		}
	}()
}

// fillLocked is fill with c.fillMu held.
func (c *Consumer) fillLocked(ctx context.Context) (bool, error) {
	prefetch := c.capacity()
	type job struct {
		pt   *part
		from uint64
		room int
	}
	var jobs []job
	c.mu.Lock()
	for _, pt := range c.owned {
		if pt.dirty && !pt.draining && len(pt.buf) < prefetch {
			jobs = append(jobs, job{pt, pt.read, prefetch - len(pt.buf)})
		}
	}
	c.mu.Unlock()
	got := false
	var errs []error
	// Read every partition in one ReadQueues call where the store can (a failure of
	// the whole call fails each partition's read), else up to readers partitions at
	// once; then take the results in order, each partition's as its own ReadQueue's.
	type result struct {
		r   driver.QueueRead
		err error
	}
	results := make([]result, len(jobs))
	if br, ok := c.q.store.(driver.QueueBatchReader); ok && len(jobs) > 1 {
		// One call for every partition (one round trip per store node), each
		// result exactly the partition's ReadQueue.
		reads := make([]driver.QueueReadReq, len(jobs))
		for i, j := range jobs {
			reads[i] = driver.QueueReadReq{P: j.pt.p, From: j.from, Max: j.room}
		}
		rs, err := br.ReadQueues(ctx, c.name, reads)
		if err == nil && len(rs) != len(reads) {
			err = driver.Errorf(dcsync.Internal, "queue.Receive", "the store returned %d reads for %d partitions", len(rs), len(reads))
		}
		for i := range jobs {
			if err != nil {
				results[i] = result{err: err}
			} else {
				results[i] = result{rs[i].QueueRead, rs[i].Err}
			}
		}
	} else {
		sem := make(chan struct{}, readers)
		var wg sync.WaitGroup
		for i, j := range jobs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				r, err := c.q.store.ReadQueue(ctx, c.name, j.pt.p, j.from, j.room)
				results[i] = result{r, err}
			}()
		}
		wg.Wait()
	}
	for i, j := range jobs {
		r, err := results[i].r, results[i].err
		if err != nil {
			errs = append(errs, err)
			continue
		}
		now := time.Now()
		var hole uint64
		holeDue := false
		c.mu.Lock()
		pt := j.pt
		if c.owned[pt.p] != pt || pt.read != j.from {
			c.mu.Unlock()
			continue
		}
		pt.head = max(pt.head, r.Head)
		if len(r.Entries) > 0 && r.Entries[0].Seq != pt.read {
			// Trimmed below the floor (a new group, or a seek below it): start there.
			for _, en := range pt.buf {
				en.state = gone
			}
			pt.buf = nil
			pt.next, pt.read = r.Entries[0].Seq, r.Entries[0].Seq
		} else if len(r.Entries) == 0 && r.Floor > pt.read && len(pt.buf) == 0 {
			pt.next, pt.read = r.Floor, r.Floor
		}
		for _, e := range r.Entries {
			en := &entry{e: e}
			for len(pt.init) > 0 && pt.init[0].Seq < e.Seq {
				pt.init = pt.init[1:] // trimmed away
			}
			if len(pt.init) > 0 && pt.init[0].Seq == e.Seq {
				// The stored state of the entry: acked out of order (never delivered
				// again), or its failed attempts so far.
				m := pt.init[0]
				pt.init = pt.init[1:]
				if m.Acked {
					en.state, en.durable = acked, true
				}
				en.attempts, en.loaded, en.persisted = m.Attempts, m.Attempts, m.Attempts
			}
			if e.Aborted {
				en.state = acked
			}
			pt.buf = append(pt.buf, en)
		}
		pt.read += uint64(len(r.Entries))
		switch {
		case pt.read >= pt.head:
			// Caught up with the newest head known: a read that began before the hub
			// saw later events (pt.head above r.Head) leaves the partition dirty.
			pt.dirty = false
		case len(r.Entries) < j.room:
			// A reserved seq not yet written: a write in flight, or a producer's hole.
			if pt.holeSeq != pt.read || pt.holeSince.IsZero() {
				pt.holeSeq, pt.holeSince = pt.read, now
			} else if now.Sub(pt.holeSince) >= c.q.opts.holeTimeout {
				hole, holeDue = pt.read, true
			}
		}
		if len(r.Entries) > 0 {
			got = true // tombstones only: look again at once
		}
		c.mu.Unlock()
		if holeDue {
			aborted, err := c.q.store.AbortQueueSeq(ctx, c.name, pt.p, hole)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.q.opts.log.Info("queue: waited out a hole", "queue", c.name, "partition", pt.p, "seq", hole, "aborted", aborted)
			c.mu.Lock()
			pt.holeSince = time.Time{}
			c.mu.Unlock()
			got = true // read again at once
		}
	}
	return got, errors.Join(errs...)
}

// waitingFor returns the partitions the hub should watch for c: those it owns while a
// Receive waits.
func (c *Consumer) waitingFor() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting == 0 {
		return nil
	}
	out := make([]int, 0, len(c.owned))
	for p, pt := range c.owned {
		if !pt.draining {
			out = append(out, p)
		}
	}
	return out
}

// observe takes the hub's read of the bounds; it wakes c if a partition it owns has
// events beyond what it read.
func (c *Consumer) observe(by map[int]driver.QueueBounds) bool {
	c.mu.Lock()
	woke := false
	for p, pt := range c.owned {
		if b, ok := by[p]; ok && b.Head > pt.head {
			// New events (a hole or a write in flight is not news: the Receive that
			// found it reads again after a poll interval).
			pt.head = b.Head
			if b.Head > pt.read {
				pt.dirty, woke = true, true
			}
		}
	}
	c.mu.Unlock()
	if woke {
		c.signal()
	}
	return woke
}

// observeLocal marks partitions appended to in this process as dirty.
func (c *Consumer) observeLocal(ps []int) {
	c.mu.Lock()
	woke := false
	for _, p := range ps {
		if pt, ok := c.owned[p]; ok {
			pt.dirty, woke = true, true
		}
	}
	c.mu.Unlock()
	if woke {
		c.signal()
	}
}
