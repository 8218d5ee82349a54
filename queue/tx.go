package queue

import (
	"context"
	"database/sql"
	"errors"
	"sort"

	"github.com/dcsync/dcsync"
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
	txc, ok1 := c.q.store.(dcsync.QueueTxCommitter)
	txs, ok2 := c.q.store.(txStore)
	if !ok1 || !ok2 {
		return dcsync.Errorf(dcsync.NotImplemented, op, "the store has no SQL database: use Ack, and fence the output with Message.Token")
	}
	if fn == nil {
		return dcsync.Errorf(dcsync.InvalidArgument, op, "fn is nil")
	}
	// The partitions and the seqs acked in each; commitMu held in partition order.
	c.mu.Lock()
	bySeq := map[*part]map[uint64]bool{}
	for _, m := range msgs {
		pt, err := c.owner(op, m)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		if bySeq[pt] == nil {
			bySeq[pt] = map[uint64]bool{}
		}
		bySeq[pt][m.Seq] = true
	}
	c.mu.Unlock()
	pts := make([]*part, 0, len(bySeq))
	for pt := range bySeq {
		pts = append(pts, pt)
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].p < pts[j].p })
	for _, pt := range pts {
		pt.commitMu.Lock()
		defer pt.commitMu.Unlock()
	}
	offs := make([]dcsync.QueueOffset, len(pts))
	c.mu.Lock()
	for i, pt := range pts {
		n := 0
		for n < len(pt.buf) && (pt.buf[n].state == acked || bySeq[pt][pt.buf[n].e.Seq]) {
			n++
		}
		offs[i] = dcsync.QueueOffset{Token: pt.token, Next: pt.next + uint64(n), Held: pt.deliveredFrom(n)}
		if offs[i].Next == pt.firstSeq {
			offs[i].Attempts = pt.firstAttempts
		}
	}
	c.mu.Unlock()
	var lost *part
	err = txs.WriteTx(ctx, func(tx *sql.Tx) error {
		for i, pt := range pts {
			if err := txc.CommitQueueOffsetTx(ctx, tx, c.name, c.group, pt.p, offs[i]); err != nil {
				if errors.Is(err, dcsync.ErrLockLost) {
					lost = pt
				}
				return err
			}
		}
		return fn(tx)
	})
	if err != nil {
		if lost != nil {
			c.drop(lost)
		}
		return err
	}
	c.mu.Lock()
	for i, pt := range pts {
		for _, en := range pt.buf {
			if bySeq[pt][en.e.Seq] {
				en.state = acked
			}
		}
		n := int(offs[i].Next - pt.next)
		if n > 0 && n <= len(pt.buf) {
			pt.buf = append([]*entry(nil), pt.buf[n:]...)
			pt.next = offs[i].Next
			pt.held = offs[i].Held
		}
	}
	c.mu.Unlock()
	return nil
}
