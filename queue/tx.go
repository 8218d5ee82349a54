package queue

// AckTx: acks committed in one SQL transaction with the application's own writes.
//
// Invariants kept here, each with the test that fails when it is broken (seen
// failing with the invariant broken on purpose), or a note where none does ("suite"
// names a case of the conformance suite, driver/drivertest, under each store's
// TestConformance/Queue):
//
//   - The offset writes and fn's writes commit together or not at all; when they do
//     not, nothing is acked and the deliveries are in flight again.
//     TestAckTxIsAtomicWithTheApplicationsWrite.

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// txStore is implemented by stores whose queue lives in a SQL database (SQLite):
// WriteTx runs fn in one write transaction, waiting for the database's write lock
// while ctx lasts, and may run fn again after a busy attempt it rolled back.
type txStore interface {
	WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error
}

// AckTx acknowledges msgs in one SQL transaction with the application's own writes:
// in one write transaction of the store's database (see sqlite.Store.WriteTx) it
// writes the offsets, runs fn, and commits. fn may run more than once if the database
// was busy (each earlier run rolled back): it must have no effects outside tx.
// If fn fails, or a partition is no longer owned (an error matching dcsync.ErrLockLost),
// the transaction rolls back and nothing is acked: the application's writes and the
// ack commit together or not at all, which makes processing exactly-once on one host.
// Stores without a SQL database (HBase, Aerospike, memory) return an error matching
// dcsync.ErrNotImplemented.
func (c *Consumer) AckTx(ctx context.Context, msgs []*Message, fn func(tx *sql.Tx) error) (err error) {
	const op = "queue.AckTx"
	txc, ok1 := c.q.store.(driver.QueueTxCommitter)
	txs, ok2 := c.q.store.(txStore)
	if !ok1 || !ok2 {
		return driver.Errorf(dcsync.NotImplemented, op, "the store has no SQL database: use Ack, and fence the output with Message.Token")
	}
	if fn == nil {
		return driver.Errorf(dcsync.InvalidArgument, op, "fn is nil")
	}
	// The partitions, with commitMu held in partition order.
	c.mu.Lock()
	var pts []*part
	for _, m := range msgs {
		pt, err := c.owner(op, m)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		if !slices.Contains(pts, pt) {
			pts = append(pts, pt)
		}
	}
	c.mu.Unlock()
	sort.Slice(pts, func(i, j int) bool { return pts[i].p < pts[j].p })
	for _, pt := range pts {
		pt.commitMu.Lock()
		defer pt.commitMu.Unlock()
	}
	// The acks, provisionally in memory (no other write of these partitions runs while
	// commitMu is held), and the offset records they make.
	now := time.Now()
	c.mu.Lock()
	var flipped []*entry
	undo := func() {
		for _, en := range flipped {
			en.state = inflight
		}
	}
	for _, m := range msgs {
		_, en, err := c.holding(op, m, now)
		if err != nil {
			undo()
			c.mu.Unlock()
			return err
		}
		if en.state == inflight {
			en.state = acked
			flipped = append(flipped, en)
		}
	}
	snaps := make([]snapshot, len(pts))
	for i, pt := range pts {
		s, err := c.snapshot(pt, writeAck)
		if err != nil {
			undo()
			for _, pt := range pts[:i] {
				pt.clearing = false
			}
			c.mu.Unlock()
			return err
		}
		if !s.same {
			pt.version++
			s.off.Version = pt.version
		}
		snaps[i] = s
	}
	c.mu.Unlock()
	var lost *part
	err = txs.WriteTx(ctx, func(tx *sql.Tx) error {
		for i, pt := range pts {
			if snaps[i].same {
				continue
			}
			if !pt.lk.Held() {
				lost = pt
				return driver.Errorf(dcsync.LockLost, op, "partition %d: the lease of token %d is over", pt.p, pt.token)
			}
			if err := txc.CommitQueueOffsetTx(ctx, tx, c.name, c.group, pt.p, snaps[i].off); err != nil {
				if errors.Is(err, dcsync.ErrLockLost) {
					lost = pt
				}
				return err
			}
		}
		return fn(tx)
	})
	c.mu.Lock()
	if err != nil {
		undo() // nothing is acked: the deliveries are in flight again, until their deadlines
	} else {
		c.countAcks(ctx, flipped)
	}
	for i, pt := range pts {
		c.apply(pt, snaps[i], err == nil)
	}
	c.mu.Unlock()
	if lost != nil {
		c.tel.ZombieAcks(ctx, len(msgs))
	}
	if lost != nil {
		c.drop(lost)
	}
	return err
}
