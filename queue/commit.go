package queue

// Offset commits: the offset record that describes a partition (snapshot), its
// conditional writes (write, put), their outcome (apply), and Seek.
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - Every write carries the owner's fencing token and a Version strictly above the
//     owner's previous write, one write at a time per partition (part.commitMu): the
//     store applies it only while the token is stored and the stored Version is
//     lower, so a late first attempt of a write never undoes a later one.
//     TestOffsetVersionsIncreasePerOwner. Writes of several partitions at once
//     (writeMany) take their commitMu in partition order, as AckTx does.
//   - A write refused with LockLost drops the partition (rebalance.go, drop).
//     TestRefusedWriteDropsThePartition.
//   - Next moves over the acked prefix only; acks above an un-acked entry are Acked
//     marks, failed attempts above Next are attempt marks. Suite
//     AcrossOwners/RebalanceKeepsAcksAboveANack, AcrossOwners/MarksWindow (acks);
//     AcrossOwners/DeathKeepsAcksAndAttempts, AcrossOwners/VisibilityAttemptsSurviveAMove,
//     AcrossOwners/DeadLetterAcrossOwners (attempts).
//   - Held is set by the write before a delivery, kept by ack writes while an entry
//     this owner delivered is un-acked or it streams the partition (one write per
//     batch), cleared once it caught up and by a release.
//     TestStreamingKeepsOffsetHeld; TestCloseRecordsDeliveriesInFlightAsFailed.
//   - Acks count as recorded (durable) only after the write that holds them
//     succeeded. TestAckFailsWhenTheWriteFails.
//   - Commits are refused once the partition's lock is no longer Held() (its lease
//     ended; a successor may own it). No test fails when only this check is removed:
//     the store's token fence refuses the same write once a successor claimed the
//     record, and before that the write is the last owner's and the successor starts
//     from it.

import (
	"context"
	"database/sql"
	"errors"
	"sort"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// deliveredFrom reports whether an entry from buf[n] on was delivered by this owner
// and is not acked (in flight, or waiting for a retry): then the offset stays marked
// held (under c.mu).
func (pt *part) deliveredFrom(n int) bool {
	for _, en := range pt.buf[n:] {
		if en.state != acked && en.attempts > en.loaded {
			return true
		}
	}
	return false
}

// streaming reports whether the owner is delivering pt's events in a stream after an
// ack of n entries: events are buffered behind them, or known to be in the store
// beyond what it read (under c.mu). The commit then keeps the offset marked held, so
// that the next Receive needs no write of its own before it delivers: one write
// per batch instead of two. The price is that a death in that state counts an attempt
// against the event at the offset even if it was not delivered yet; an owner that
// dies before it delivered anything, or after it caught up, costs none.
func (pt *part) streaming(n int) bool {
	return pt.held && (len(pt.buf) > n || pt.dirty)
}

// Kinds of offset writes.
const (
	writeAck     = iota // acks, attempts, dead-lettering: Held while delivering
	writeHeld           // before a delivery: Held
	writeRelease        // the owner lets the partition go: Held clear, deliveries in flight failed
)

// snapshot is one write of a partition's offset record, and what it records.
type snapshot struct {
	off  driver.QueueOffset
	same bool   // the record is stored already: nothing to write
	base uint64 // pt.next when it was taken
	n    int    // buffered entries below off.Next
	ents []*entry
	fail []int    // the failed attempts recorded for ents[i]
	acks []*entry // the entries recorded as acked
}

// snapshot computes the offset record that describes pt (under c.mu): Next over the
// acked prefix (buffered entries, then acked marks of entries not read yet), the
// failed attempts of the entry at Next, and Marks for acks and failed attempts above
// it. Its Version is set when it is written (put).
func (c *Consumer) snapshot(pt *part, kind int) (snapshot, error) {
	s := snapshot{base: pt.next}
	n := 0
	for n < len(pt.buf) && pt.buf[n].state == acked {
		n++
	}
	next := pt.next + uint64(n)
	init := pt.init
	if n == len(pt.buf) {
		for len(init) > 0 && init[0].Seq == next && init[0].Acked {
			init = init[1:]
			next++
		}
	}
	s.n, s.off.Token, s.off.Next = n, pt.token, next
	var marks []driver.QueueMark
	for i, en := range pt.buf {
		f := en.failed(kind == writeRelease)
		s.ents, s.fail = append(s.ents, en), append(s.fail, f)
		if en.state == acked {
			s.acks = append(s.acks, en)
		}
		switch {
		case i < n:
		case i == n:
			s.off.Attempts = f
		case en.state == acked:
			marks = append(marks, driver.QueueMark{Seq: en.e.Seq, Acked: true})
		case f > 0:
			marks = append(marks, driver.QueueMark{Seq: en.e.Seq, Attempts: f})
		}
	}
	for _, m := range init {
		if m.Seq == next {
			s.off.Attempts = m.Attempts
			continue
		}
		marks = append(marks, m)
	}
	var err error
	if s.off.Marks, err = driver.EncodeQueueMarks(next, marks); err != nil {
		return s, err
	}
	switch kind {
	case writeAck:
		s.off.Held = pt.deliveredFrom(n) || pt.streaming(n)
	case writeHeld:
		s.off.Held = true
	}
	s.same = pt.known && s.off == pt.last
	if !s.off.Held && pt.held && !s.same {
		pt.clearing = true
	}
	return s, nil
}

// write takes a snapshot of pt and writes it: one conditional write, skipped when the
// record is stored already.
func (c *Consumer) write(ctx context.Context, pt *part, kind int) error {
	pt.commitMu.Lock()
	defer pt.commitMu.Unlock()
	c.mu.Lock()
	if c.owned[pt.p] != pt {
		c.mu.Unlock()
		return driver.Errorf(dcsync.LockLost, "queue.commit", "partition %d (token %d) is no longer owned by this consumer", pt.p, pt.token)
	}
	s, err := c.snapshot(pt, kind)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.put(ctx, pt, s, true); err != nil {
		return err
	}
	c.maybeTrim(pt)
	return nil
}

// writeMany writes the offset records of pts (distinct partitions), each as write
// would (its own snapshot, condition, Version and outcome), and returns each one's
// error. On a store that writes many offsets in one round trip (driver.QueueCommitter:
// HBase, Aerospike) the records go in one CommitQueueOffsets call, each with
// CommitQueueOffset's own outcome; on a store that commits in SQL transactions
// (SQLite: driver.QueueTxCommitter and WriteTx) in one transaction, one commit of the
// file instead of one per partition; on the others the writes run at once, up to
// `readers` at a time. A record refused with LockLost (in the batch or the transaction)
// changes nothing of it and does not stop the others.
func (c *Consumer) writeMany(ctx context.Context, pts []*part, kind int) []error {
	errs := make([]error, len(pts))
	if len(pts) == 1 {
		errs[0] = c.write(ctx, pts[0], kind)
		return errs
	}
	// commitMu in partition order, as AckTx takes them.
	order := make([]*part, len(pts))
	copy(order, pts)
	sort.Slice(order, func(i, j int) bool { return order[i].p < order[j].p })
	for _, pt := range order {
		pt.commitMu.Lock()
	}
	defer func() {
		for _, pt := range order {
			pt.commitMu.Unlock()
		}
	}()
	snaps := make([]snapshot, len(pts))
	ok := make([]bool, len(pts))
	c.mu.Lock()
	for i, pt := range pts {
		if c.owned[pt.p] != pt {
			errs[i] = driver.Errorf(dcsync.LockLost, "queue.commit", "partition %d (token %d) is no longer owned by this consumer", pt.p, pt.token)
			continue
		}
		snaps[i], errs[i] = c.snapshot(pt, kind)
		ok[i] = errs[i] == nil
	}
	c.mu.Unlock()
	txc, ok1 := c.q.store.(driver.QueueTxCommitter)
	txs, ok2 := c.q.store.(txStore)
	if bc, ok3 := c.q.store.(driver.QueueCommitter); ok3 {
		c.putMany(pts, snaps, ok, errs, func(todo []int) { c.putBatch(ctx, bc, pts, snaps, todo, errs) })
	} else if ok1 && ok2 {
		c.putMany(pts, snaps, ok, errs, func(todo []int) { c.putTx(ctx, txc, txs, pts, snaps, todo, errs) })
	} else {
		parallel(len(pts), func(i int) {
			if ok[i] {
				errs[i] = c.put(ctx, pts[i], snaps[i], true)
			}
		})
	}
	for i, pt := range pts {
		if ok[i] && errs[i] == nil {
			c.maybeTrim(pt)
		}
	}
	return errs
}

// putMany is put of several partitions' snapshots (those with ok[i]), with every
// pts[i].commitMu held: it gives each record to write its next Version and calls
// write once with the records to write (write sets their errs[i]), then applies every
// outcome and drops the partitions refused with LockLost.
func (c *Consumer) putMany(pts []*part, snaps []snapshot, ok []bool, errs []error, write func(todo []int)) {
	var todo []int
	for i, pt := range pts {
		switch {
		case !ok[i] || snaps[i].same:
		case !pt.lk.Held():
			errs[i] = driver.Errorf(dcsync.LockLost, "queue.commit", "partition %d: the lease of token %d is over", pt.p, pt.token)
		default:
			pt.version++
			snaps[i].off.Version = pt.version
			todo = append(todo, i)
		}
	}
	if len(todo) > 0 {
		write(todo)
	}
	c.mu.Lock()
	for i, pt := range pts {
		if ok[i] {
			c.apply(pt, snaps[i], errs[i] == nil)
		}
	}
	c.mu.Unlock()
	for i, pt := range pts {
		if ok[i] && errors.Is(errs[i], dcsync.ErrLockLost) {
			c.drop(pt)
		}
	}
}

// putTx writes the records todo of putMany in one SQL transaction; it sets errs[i].
func (c *Consumer) putTx(ctx context.Context, txc driver.QueueTxCommitter, txs txStore, pts []*part, snaps []snapshot, todo []int, errs []error) {
	res := make([]error, len(pts))
	err := txs.WriteTx(ctx, func(tx *sql.Tx) error {
		clear(res) // a busy attempt was rolled back: this one starts afresh
		for _, i := range todo {
			err := txc.CommitQueueOffsetTx(ctx, tx, c.name, c.group, pts[i].p, snaps[i].off)
			if errors.Is(err, dcsync.ErrLockLost) {
				res[i] = err // refused: nothing of this record was written
				continue
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	for _, i := range todo {
		if errs[i] = res[i]; err != nil {
			errs[i] = err
		}
	}
}

// putBatch writes the records todo of putMany in one CommitQueueOffsets call (one
// round trip per store node); it sets errs[i]. A failure of the call as a whole
// (nothing sent, or nothing known of it) is every record's error.
func (c *Consumer) putBatch(ctx context.Context, bc driver.QueueCommitter, pts []*part, snaps []snapshot, todo []int, errs []error) {
	commits := make([]driver.QueueCommit, len(todo))
	for j, i := range todo {
		commits[j] = driver.QueueCommit{P: pts[i].p, Off: snaps[i].off}
	}
	res, err := bc.CommitQueueOffsets(ctx, c.name, c.group, commits)
	if err == nil && len(res) != len(todo) {
		err = driver.Errorf(dcsync.Internal, "queue.commit", "the store returned %d results for %d offsets", len(res), len(todo))
	}
	for j, i := range todo {
		if err != nil {
			errs[i] = err
		} else {
			errs[i] = res[j]
		}
	}
}

// put writes s with pt.commitMu held, with the next Version of the record. A
// LockLost (another owner's token, or a later write of this owner is stored: it is
// confused) drops the partition. live refuses the write once the lease is over.
func (c *Consumer) put(ctx context.Context, pt *part, s snapshot, live bool) error {
	var err error
	switch {
	case s.same:
	case live && !pt.lk.Held():
		err = driver.Errorf(dcsync.LockLost, "queue.commit", "partition %d: the lease of token %d is over", pt.p, pt.token)
	default:
		pt.version++
		s.off.Version = pt.version
		err = c.q.store.CommitQueueOffset(ctx, c.name, c.group, pt.p, s.off)
	}
	c.mu.Lock()
	c.apply(pt, s, err == nil)
	c.mu.Unlock()
	if errors.Is(err, dcsync.ErrLockLost) {
		c.drop(pt)
	}
	return err
}

// apply takes the outcome of writing s (under c.mu): on success the entries below
// Next leave the buffer, recorded acks are durable and recorded attempts persisted.
func (c *Consumer) apply(pt *part, s snapshot, ok bool) {
	pt.clearing = false
	if !ok {
		pt.known = false // in doubt
		return
	}
	pt.last, pt.known = s.off, true
	pt.last.Version = 0
	for i, en := range s.ents {
		en.persisted = max(en.persisted, s.fail[i])
	}
	for _, en := range s.acks {
		en.durable = true
	}
	if pt.next == s.base && len(pt.buf) >= s.n {
		pt.buf = append([]*entry(nil), pt.buf[s.n:]...)
		pt.next = s.off.Next
		if pt.next > pt.read {
			pt.read, pt.dirty = pt.next, true
		}
		for len(pt.init) > 0 && pt.init[0].Seq < pt.read {
			pt.init = pt.init[1:]
		}
	}
	pt.held = s.off.Held
}

// Seek moves the group's offset in partition p, which the consumer must own, to seq:
// the events from seq on are delivered (again), with no attempts and no acks recorded
// above it. Events below the partition's floor are gone; a seek below it starts at
// the floor. Deliveries from before the Seek can no longer be acked.
func (c *Consumer) Seek(ctx context.Context, p int, seq uint64) error {
	c.mu.Lock()
	pt := c.owned[p]
	c.mu.Unlock()
	if pt == nil {
		return driver.Errorf(dcsync.LockLost, "queue.Seek", "partition %d is not owned by this consumer", p)
	}
	pt.commitMu.Lock()
	defer pt.commitMu.Unlock()
	pt.version++
	off := driver.QueueOffset{Token: pt.token, Next: seq, Version: pt.version}
	err := c.q.store.CommitQueueOffset(ctx, c.name, c.group, p, off)
	for try := 0; try < 3 && dcsync.CodeOf(err) == dcsync.InvalidArgument; try++ {
		// Below the floor (the store refuses to move an offset back there, writing
		// nothing): the seek starts at the floor.
		b, berr := c.q.store.QueueBounds(ctx, c.name, []int{p})
		if berr != nil || b[0].Floor <= off.Next {
			break
		}
		pt.version++
		seq, off.Next, off.Version = b[0].Floor, b[0].Floor, pt.version
		err = c.q.store.CommitQueueOffset(ctx, c.name, c.group, p, off)
	}
	if err != nil {
		c.mu.Lock()
		pt.known = false
		c.mu.Unlock()
		if errors.Is(err, dcsync.ErrLockLost) {
			c.drop(pt)
		}
		return err
	}
	c.fillMu.Lock()
	c.mu.Lock()
	for _, en := range pt.buf {
		if en.state != acked {
			en.state = gone
		}
	}
	pt.buf, pt.next, pt.read, pt.dirty = nil, seq, seq, true
	pt.init, pt.held, pt.clearing = nil, false, false
	off.Version = 0
	pt.last, pt.known = off, true
	c.mu.Unlock()
	c.fillMu.Unlock()
	c.signal()
	return nil
}
