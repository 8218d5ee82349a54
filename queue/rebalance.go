package queue

// Joining a group, and taking, draining and releasing partitions (membership reads are
// in members.go, the assignment in assign.go).
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - A consumer owns a partition only while it holds the partition's lock, and it
//     claims the offset record with the lock's fencing token before it delivers
//     anything: the store then refuses every write of an earlier owner (a zombie).
//     TestZombieAckRefusedAndEventsMove, suite Front/ZombieAck.
//   - Taking a partition whose record says Held (its owner died after it delivered)
//     charges the entry at the offset one failed attempt and clears Held, in one
//     write, before anything is delivered. TestDeathsCountAsAttempts, suite
//     AcrossOwners/DeathKeepsAcksAndAttempts.
//   - A partition no longer assigned is drained: nothing more is handed out from it
//     (deliver.go), its deliveries in flight can still be acked, and it is released
//     only once none is in flight (busy). TestDrainingHandsOutNothingAndWaitsForAcks.
//   - A partition is released only with its whole state written, then its lock
//     freed: one write of the acked prefix, the acks above it, every failed attempt
//     (deliveries in flight count as failed) and Held cleared.
//     TestCloseRecordsDeliveriesInFlightAsFailed, suite
//     AcrossOwners/RebalanceKeepsAcksAboveANack (Held left set charges the
//     successor's delivery an extra attempt).
//   - A partition whose write the store refused with LockLost (commit.go, put) is
//     dropped: forgotten, its lock freed; it is delivered from again only once taken
//     anew, with a greater token, from the record. TestRefusedWriteDropsThePartition.
//   - A member that joins is handed its share within a few of its own membership
//     reads: every member reads the membership each poll interval and releases at
//     once a partition no longer its own with nothing in flight.
//     TestJoinerServedWithinAFewMembershipReads (internal/queuebench).
//   - A joiner takes a free slot directly (one membership read, then the lowest free
//     slot), and a consumer of a full group backs off rather than retry.
//     TestMemberAboveAGapMovesDown (the joiner takes slot 20, the lowest free, at
//     once), TestFullGroupStandbyBacksOff (internal/queuebench).
//   - On a store with driver.LockMover and driver.QueueClaimer the partitions a round
//     takes move together: one batched acquire of their locks, then one batched claim
//     with each lock's token, each partition's outcome that of take alone (a partition
//     is adopted only once its own claim succeeded; one whose claim failed has its
//     lock freed); those a round releases (and Close) have their records written
//     first, then their locks freed in one batched release. No partition is taken,
//     claimed or freed one at a time there: TestPartitionMovesAreBatched
//     (internal/queuebench); each outcome the single operation's: suite parts
//     LockMove and QueueClaims.
//   - A round whose membership read differs from the round's before takes no
//     partition, unless settleRounds-1 rounds in a row did (then it takes its share
//     of what it read): TestJoinerTakesOnceTheMembershipHolds,
//     TestFlickeringMembershipStillTakes.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// settleRounds bounds how long a consumer waits for its group's membership to hold
// before it takes partitions: a round whose membership read differs from the round's
// before takes nothing (releases go on), unless settleRounds-1 rounds in a row did.
// A group whose members join together (a deploy) then splits the partitions by the
// whole group, not by the first few members each saw, which would take many
// partitions only to hand them back a round later (Kafka's consumer groups wait
// group.initial.rebalance.delay.ms, 3 s by default, for the same reason). A lone
// joiner pays one poll interval.
const settleRounds = 3

// lockName names the lock of a member slot ("m") or partition ("p") of the group:
// the queue's and group's names are length-prefixed, so names never collide.
func (c *Consumer) lockName(kind string, n int) string {
	return lockName(c.name, c.group, kind, c.dead, n)
}

// lockName names lock n of kind "m" or "p" of a group's consumers (dead: of its
// dead-letter consumers) in queue name.
func lockName(name, group, kind string, dead bool, n int) string {
	d := ""
	if dead {
		d = "d"
	}
	return fmt.Sprintf("queue:%d:%s%d:%s%s%s/%d", len(name), name, len(group), group, kind, d, n)
}

// join reads the member slots once and takes a free one directly: the lowest free slot,
// or, after losing a race for one to another joiner, one of the lowest few (4, then
// 16) at random, after a random fraction of a poll interval, so that consumers joining
// together soon stop trying the same one. While every slot is taken it backs off,
// doubling up to idleBackoff poll intervals (at most a third of the lease; on a store
// without driver.LockBatcher, where a read costs a call per slot, a third of the
// lease).
func (c *Consumer) join() (*lock.Lock, context.Context) {
	o := c.q.opts
	full := o.pollInterval
	fullest := max(min(o.lease/3, idleBackoff*o.pollInterval), o.pollInterval)
	if _, batching := c.q.store.(driver.LockBatcher); !batching {
		// A read costs a call per slot: wait as long as a member's renewal.
		fullest = max(o.lease/3, o.pollInterval)
	}
	spread := 1
	for c.bg.Err() == nil {
		wait := jitter(o.pollInterval)
		occ, err := c.readMembers(c.bg, c.hi)
		if err != nil {
			c.q.opts.log.Debug("queue: reading members", "queue", c.name, "err", err)
		} else if s, ok := c.pickSlot(occ, len(c.parts), spread); !ok {
			wait = jitter(full)
			full = min(2*full, fullest)
		} else {
			lk, err := c.q.locks.TryAcquire(c.bg, c.lockName("m", s), lock.Level(dcsync.XDC))
			if err != nil {
				c.unmarkSlot(s)
			}
			if err == nil {
				c.mu.Lock()
				c.slot = s
				c.mu.Unlock()
				c.hi = s + 1
				if len(occ) > 0 {
					c.hi = max(c.hi, occ[len(occ)-1]+1)
				}
				return lk, lk.KeepAlive(c.bg)
			}
			if errors.Is(err, dcsync.ErrLockUnavailable) {
				// Another joiner took it first: choose again soon, among more slots.
				spread = min(4*spread, memberWindow/2)
				wait = time.Duration(rand.Int64N(int64(o.pollInterval) + 1))
			} else {
				c.q.opts.log.Debug("queue: member slot", "queue", c.name, "slot", s, "err", err)
			}
		}
		select {
		case <-c.bg.Done():
		case <-time.After(wait):
		}
	}
	return nil, nil
}

// rebalance reads the live member slots (one batched call), works out the consumer's
// share from them (assign.go), starts draining partitions outside it, releases
// drained ones and takes free ones inside it. It reports whether anything is under
// way (a new view, a partition draining, an assigned one still held by another
// consumer), and whether the consumer should take a lower member slot (rejoin): it
// has memberWindow/2 or more free slots below it, and members reading from slot 0
// might not see it.
func (c *Consumer) rebalance(ctx context.Context) (waiting, rejoin bool) {
	c.mu.Lock()
	slot := c.slot
	c.mu.Unlock()
	occ, err := c.readMembers(ctx, max(c.hi, slot+1))
	if err != nil {
		c.q.opts.log.Debug("queue: reading members", "queue", c.name, "err", err)
		return true, false
	}
	if i, found := slices.BinarySearch(occ, slot); !found {
		// Its own lease is still on by its clock: count it.
		occ = slices.Insert(occ, i, slot)
	}
	c.hi = occ[len(occ)-1] + 1
	i, _ := slices.BinarySearch(occ, slot)
	pred := -1
	if i > 0 {
		pred = occ[i-1]
	}
	rejoin = slot-pred-1 >= memberWindow/2
	if c.assigned == nil || slot != c.viewSlot || !slices.Equal(occ, c.view) {
		owners := assign(len(c.parts), occ)
		c.assigned = map[int]bool{}
		for i, s := range owners {
			if s == slot {
				c.assigned[c.parts[i]] = true
			}
		}
		c.view, c.viewSlot = occ, slot
		c.tel.Rebalanced(ctx)
		waiting = true // a new view: look again soon
		c.unsettled++
	} else {
		c.unsettled = 0
	}
	assigned := c.assigned
	var release []*part
	now := time.Now()
	c.mu.Lock()
	for p, pt := range c.owned {
		if assigned[p] && pt.draining {
			pt.draining = false // assigned again before it was released
		}
		if !assigned[p] && !pt.draining {
			pt.draining = true
		}
		if pt.draining {
			if pt.busy(now) {
				waiting = true
			} else {
				release = append(release, pt)
			}
		}
	}
	c.mu.Unlock()
	c.releaseAll(ctx, release)
	c.mu.Lock()
	owned := make([]*part, 0, len(c.owned))
	for _, pt := range c.owned {
		owned = append(owned, pt)
	}
	var take []int
	for p := range assigned {
		if c.owned[p] == nil {
			take = append(take, p)
		}
	}
	c.mu.Unlock()
	for _, pt := range owned {
		c.maybeTrim(pt)
	}
	slices.Sort(take)
	if c.unsettled > 0 && c.unsettled < settleRounds {
		// The membership moved since the last round (members joining): take once it
		// holds, so that a consumer that saw few members of a group still forming
		// does not take many partitions only to hand them back (see settleRounds).
		take = nil
	}
	if len(take) > 0 && !c.sameQueue(ctx) {
		return true, false
	}
	var failed atomic.Bool
	_, batching := c.q.store.(driver.LockBatcher)
	_, moving := c.q.store.(driver.LockMover)
	if batching && (len(take) > 1 || moving && len(take) > 0) {
		// One batched read of their locks first: only the free ones are tried (while
		// their owners drain, trying each would cost a failed acquire per partition
		// per round). Without a batch it would cost as much as trying. On a store
		// with driver.LockMover (every store of this module) even one partition is
		// read first: a read there is cheaper than a write attempt (SQLite's single
		// writer; a refused take on HBase and Aerospike is a write too).
		free, err := c.freeParts(ctx, take)
		if err != nil {
			c.q.opts.log.Debug("queue: reading partition locks", "queue", c.name, "err", err)
		} else {
			if len(free) < len(take) {
				failed.Store(true)
			}
			take = free
		}
	}
	if moving && len(take) > 0 {
		// One batched acquire of their locks and one batched claim of their offsets,
		// instead of two writes per partition (a single partition too: no partition is
		// taken one at a time on such a store).
		if c.takeMany(ctx, take) {
			failed.Store(true)
		}
		return waiting || failed.Load(), rejoin
	}
	parallel(len(take), func(i int) {
		p := take[i]
		if err := c.take(ctx, p); err != nil {
			c.logTake(ctx, p, err)
			failed.Store(true)
		}
	})
	return waiting || failed.Load(), rejoin
}

// logTake logs why partition p was not taken, unless someone else holds it or the
// consumer is closing.
func (c *Consumer) logTake(ctx context.Context, p int, err error) {
	if !errors.Is(err, dcsync.ErrLockUnavailable) && ctx.Err() == nil {
		c.q.opts.log.Debug("queue: taking partition", "queue", c.name, "partition", p, "err", err)
	}
}

// freeParts returns the partitions of ps whose locks are free, read in one batched
// call.
func (c *Consumer) freeParts(ctx context.Context, ps []int) ([]int, error) {
	keys := make([]dcsync.Key, len(ps))
	for i, p := range ps {
		keys[i] = dcsync.Key{Level: dcsync.XDC, Client: c.q.opts.client, Farm: c.q.opts.farm, Name: c.lockName("p", p)}
	}
	res, err := driver.InspectLocks(ctx, c.q.store, keys)
	if err != nil {
		return nil, err
	}
	var free []int
	for i, r := range res {
		if errors.Is(r.Err, dcsync.ErrNotFound) {
			free = append(free, ps[i])
		}
	}
	return free, nil
}

// parallel runs f(0..n-1), up to `readers` at a time, and waits for them.
func parallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, readers)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// busy reports whether the partition has messages in flight (not yet past their
// visibility deadline).
func (pt *part) busy(now time.Time) bool {
	for _, en := range pt.buf {
		if en.state == inflight && now.Before(en.deadline) {
			return true
		}
	}
	return false
}

// take acquires partition p's lock and claims its offset with the lock's token. The
// claim writes the token only. When the record says Held (the previous owner died
// while it delivered), the entry at the offset is charged one failed attempt, and Held
// cleared, in one write; otherwise taking costs the claim alone.
func (c *Consumer) take(ctx context.Context, p int) error {
	lk, err := c.q.locks.TryAcquire(ctx, c.lockName("p", p), lock.Level(dcsync.XDC))
	if err != nil {
		return err
	}
	lost := lk.KeepAlive(c.bg)
	off, err := c.q.store.ClaimQueuePartition(ctx, c.name, c.group, p, lk.Token())
	if err != nil {
		c.releaseLock(lk)
		return err
	}
	return c.adopt(ctx, p, lk, lost, off)
}

// takeMany takes the partitions of ps as take does each, in two store calls on a store
// with driver.LockMover (and driver.QueueClaimer): one batched acquire of their locks,
// then one batched claim, with the fencing token of each lock taken, of their offsets
// (each outcome that of the single operation: a partition whose claim the store
// refuses has its lock freed). It reports whether any partition was not taken.
func (c *Consumer) takeMany(ctx context.Context, ps []int) (failed bool) {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = c.lockName("p", p)
	}
	taken, err := c.q.locks.TryAcquireMany(ctx, names, lock.Level(dcsync.XDC))
	if err != nil {
		c.logTake(ctx, -1, err)
		return true
	}
	var got []int
	var lks []*lock.Lock
	for i, t := range taken {
		if t.Err != nil {
			c.logTake(ctx, ps[i], t.Err)
			failed = true
			continue
		}
		got, lks = append(got, ps[i]), append(lks, t.Lock)
	}
	if len(got) == 0 {
		return failed
	}
	losts := make([]context.Context, len(lks))
	claims := make([]driver.QueueClaim, len(lks))
	for i, lk := range lks {
		losts[i] = lk.KeepAlive(c.bg)
		claims[i] = driver.QueueClaim{P: got[i], Token: lk.Token()}
	}
	res, err := driver.ClaimQueuePartitions(ctx, c.q.store, c.name, c.group, claims)
	if err == nil && len(res) != len(claims) {
		err = driver.Errorf(dcsync.Internal, "queue.take", "the store returned %d claims for %d", len(res), len(claims))
	}
	if err != nil {
		c.logTake(ctx, -1, err)
		c.releaseLocks(lks)
		return true
	}
	var refused []*lock.Lock
	var ok []int
	for i, r := range res {
		if r.Err != nil {
			c.logTake(ctx, got[i], r.Err)
			refused = append(refused, lks[i])
			failed = true
			continue
		}
		ok = append(ok, i)
	}
	c.releaseLocks(refused)
	var adoptFailed atomic.Bool
	parallel(len(ok), func(j int) {
		i := ok[j]
		if err := c.adopt(ctx, got[i], lks[i], losts[i], res[i].Offset); err != nil {
			c.logTake(ctx, got[i], err)
			adoptFailed.Store(true)
		}
	})
	return failed || adoptFailed.Load()
}

// adopt makes partition p, whose lock lk (KeepAlive context lost) this consumer took
// and whose offset it claimed (off, with lk's token), one of its owned partitions:
// when the record says Held, the entry at the offset is charged one failed attempt and
// Held cleared, in one write, first. On any failure it frees the lock.
func (c *Consumer) adopt(ctx context.Context, p int, lk *lock.Lock, lost context.Context, off driver.QueueOffset) error {
	st := c.q.store
	marks, err := off.Marks.Decode(off.Next)
	if err != nil {
		c.releaseLock(lk)
		return err
	}
	if off.Held {
		// The previous owner died while it had delivered the event at the offset (it
		// marks the offset held before it delivers): that delivery counts as a failed
		// attempt. Held stays clear until this consumer delivers: an owner that dies
		// before it delivers anything costs the event no attempt.
		off.Attempts++
		off.Held = false
		off.Version++
		if err := st.CommitQueueOffset(ctx, c.name, c.group, p, off); err != nil {
			c.releaseLock(lk)
			return err
		}
	}
	pt := &part{p: p, lk: lk, token: lk.Token(), next: off.Next, read: off.Next, dirty: true,
		version: off.Version, last: off, known: true}
	pt.last.Version = 0
	if off.Attempts > 0 {
		pt.init = append(pt.init, driver.QueueMark{Seq: off.Next, Attempts: off.Attempts})
	}
	pt.init = append(pt.init, marks...)
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		c.releaseLock(lk)
		return ErrClosed
	}
	c.owned[p] = pt
	c.tel.Owned(ctx, 1)
	c.wg.Add(1) // under c.mu, before Close can wait
	c.mu.Unlock()
	c.signal()
	c.hub.poke()
	go func() {
		defer c.wg.Done()
		<-lost.Done()
		c.drop(pt)
	}()
	return nil
}

func (c *Consumer) releaseLock(lk *lock.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = lk.Release(ctx)
}

// drop forgets pt: its lease ended, or the store refused its token. It frees the lock
// in case this consumer still holds it (a Release of a lost lock does nothing). The
// locks of partitions dropped together (the leases renewed in one batch end together)
// are freed together, by one goroutine, in one batched release on a store with
// driver.LockMover: on SQLite, 4,096 leases lost at once had made 4,096 write
// transactions, which held up the renewals of every other consumer of the file.
func (c *Consumer) drop(pt *part) {
	c.mu.Lock()
	if c.owned[pt.p] == pt && !c.closing {
		delete(c.owned, pt.p)
		c.tel.Owned(context.Background(), -1)
		c.dropped = append(c.dropped, pt.lk)
		if !c.dropping {
			c.dropping = true
			c.wg.Add(1)
			go c.freeDropped()
		}
	}
	c.mu.Unlock()
	c.signal()
	select {
	case c.tick <- struct{}{}:
	default:
	}
}

// freeDropped frees the locks drop collects until there are none left.
func (c *Consumer) freeDropped() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		lks := c.dropped
		c.dropped = nil
		if len(lks) == 0 {
			c.dropping = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.releaseLocks(lks)
	}
}

// releaseLocks frees lks: in one store call on a store with driver.LockMover, else
// each on its own, concurrently.
func (c *Consumer) releaseLocks(lks []*lock.Lock) {
	if _, moving := c.q.store.(driver.LockMover); !moving || len(lks) == 0 {
		parallel(len(lks), func(i int) { c.releaseLock(lks[i]) })
		return
	}
	// As long as one release may take (releaseLock): a batch that cannot finish by
	// then leaves its locks to expire, as a single release would.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.q.locks.ReleaseMany(ctx, lks)
}

// releaseAll releases the partitions of pts: it writes each one's whole state (the
// acked prefix, acks above it and every failed attempt, deliveries in flight included,
// as Marks; Held cleared) in one write each, concurrently (none where the record is
// stored already), and then frees their locks, in one store call on a store with
// driver.LockMover: the next owner delivers exactly the entries not acked, each with
// its attempts. A Nack's backoff is not kept: the next owner delivers at once.
func (c *Consumer) releaseAll(ctx context.Context, pts []*part) {
	parallel(len(pts), func(i int) { c.writeReleased(ctx, pts[i]) })
	lks := make([]*lock.Lock, len(pts))
	for i, pt := range pts {
		lks[i] = pt.lk
	}
	c.releaseLocks(lks)
}

// writeReleased writes pt's whole state as releaseAll does, and forgets pt; its lock
// is left to the caller to free.
func (c *Consumer) writeReleased(ctx context.Context, pt *part) {
	pt.commitMu.Lock()
	c.mu.Lock()
	s, err := c.snapshot(pt, writeRelease)
	if c.owned[pt.p] == pt {
		delete(c.owned, pt.p)
		c.tel.Owned(ctx, -1)
	}
	c.mu.Unlock()
	if err == nil {
		err = c.put(ctx, pt, s, false)
	}
	pt.commitMu.Unlock()
	if err != nil {
		c.q.opts.log.Debug("queue: releasing partition", "queue", c.name, "partition", pt.p, "err", err)
	}
}

// sameQueue reports whether the queue this consumer was made for is still the one in
// the store, read before it takes partitions: a queue deleted (queue.Delete) and
// perhaps created again under its name has another creation time. A consumer of a
// deleted queue takes nothing more, and its Receive returns NotFound once it owns no
// partition: it can never take (and ack into) a new queue of the same name. A read that
// fails takes nothing this round.
func (c *Consumer) sameQueue(ctx context.Context) bool {
	spec, err := c.q.store.ReadQueueSpec(ctx, c.name)
	var gone error
	switch {
	case errors.Is(err, dcsync.ErrNotFound):
		gone = driver.Errorf(dcsync.NotFound, "queue.Consumer", "queue %q was deleted", c.name)
	case err != nil:
		c.q.opts.log.Debug("queue: reading the spec before taking partitions", "queue", c.name, "err", err)
		return false
	case !spec.Created.Equal(c.q.Spec().Created):
		gone = driver.Errorf(dcsync.NotFound, "queue.Consumer", "queue %q was deleted and created again (created %v, this consumer's %v)", c.name, spec.Created, c.q.Spec().Created)
	default:
		return true
	}
	c.mu.Lock()
	if c.gone == nil {
		c.gone = gone
		c.q.opts.log.Warn("queue: the consumer's queue is gone; it takes no partition any more", "queue", c.name, "group", c.group, "err", gone)
	}
	c.mu.Unlock()
	c.signal()
	return false
}
