package aerospike

import (
	"context"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

func checkQueueGroup(name, group string, p int) error {
	if err := checkQueueName(name); err != nil {
		return err
	}
	if err := driver.ValidateID("group", group); err != nil {
		return err
	}
	return driver.ValidateQueuePartition(p)
}

// offsetBins are the bins of an offset record.
var offsetBins = []string{qbToken, qbNext, qbAtt, qbHeld, qbVer, qbMarks}

// offsetOf reads an offset from its record's bins. A record written before Version and
// Marks existed has neither bin: Version 0, no marks.
func offsetOf(bins as.BinMap) driver.QueueOffset {
	off := driver.QueueOffset{Token: uintOf(bins[qbToken]), Next: uintOf(bins[qbNext]), Version: uintOf(bins[qbVer])}
	if n, ok := intOf(bins[qbAtt]); ok {
		off.Attempts = int(n)
	}
	if h, ok := intOf(bins[qbHeld]); ok {
		off.Held = h != 0
	}
	switch m := bins[qbMarks].(type) {
	case []byte:
		off.Marks = driver.QueueMarks(m)
	case string:
		off.Marks = driver.QueueMarks(m)
	}
	return off
}

func heldValue(h bool) int {
	if h {
		return 1
	}
	return 0
}

// marksValue is the bin value of marks: nil (no bin) when there are none.
func marksValue(m driver.QueueMarks) any {
	if m == "" {
		return nil
	}
	return []byte(m)
}

// ClaimQueuePartition implements driver.QueueStore: one operate, filtered on the stored
// token being below token, reads the offset and then writes the token only (Next,
// Attempts, Held, Version and Marks stay; and the queue's incarnation id, see
// DeleteQueue). A filtered claim reads the record: when the
// stored token is token (an earlier try of this claim landed, or the claim was made
// before) it returns the stored offset; a greater token is LockLost. So a try that
// lands late, after the claim's retry and the owner's commits, is filtered out.
func (s *Store) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (driver.QueueOffset, error) {
	const op = "aerospike.ClaimQueuePartition"
	if err := checkQueueGroup(name, group, p); err != nil {
		return driver.QueueOffset{}, err
	}
	if token == 0 || token > 1<<63-1 {
		return driver.QueueOffset{}, driver.Errorf(dcsync.InvalidArgument, op, "token %d cannot own a partition", token)
	}
	inc, err := s.queueInc(ctx, op, name)
	if err != nil {
		return driver.QueueOffset{}, err
	}
	key := s.offsetKey(name, group, p)
	ops := make([]*as.Operation, 0, len(offsetBins)+2)
	for _, b := range offsetBins {
		ops = append(ops, as.GetBinOp(b))
	}
	ops = withInc(append(ops, as.PutOp(as.NewBin(qbToken, int64(token)))), inc)
	rec, code, err := s.write(ctx, op, func() *as.WritePolicy {
		wp := s.writePolicy(ctx, as.TTLDontExpire)
		wp.FilterExpression = as.ExpLess(binOr0(qbToken), as.ExpIntVal(int64(token)))
		return wp
	}, key, ops, types.FILTERED_OUT)
	if err != nil {
		return driver.QueueOffset{}, err
	}
	if code == types.OK {
		var off driver.QueueOffset
		if rec != nil {
			off = offsetOf(rec.Bins)
		}
		off.Token = token
		return off, nil
	}
	cur, err := s.getRecord(ctx, op, key)
	if err != nil {
		return driver.QueueOffset{}, err
	}
	var off driver.QueueOffset
	if cur != nil {
		off = offsetOf(cur.Bins)
	}
	if off.Token == token {
		return off, nil
	}
	return off, driver.Errorf(dcsync.LockLost, op, "partition %d of queue %q group %q is owned by token %d, above %d", p, name, group, off.Token, token)
}

// CommitQueueOffset implements driver.QueueStore: one write filtered on the stored
// token being off.Token and the stored version being below off.Version, so that a try
// that lands late, after the owner's next commit, changes nothing, and on the stored
// Next not being above off.Next. A filtered commit reads the record: when it holds
// exactly off (an earlier try of this commit landed) it returns nil; when off moves
// Next back (a rewind) the rewind is pinned in the head record, or refused below the
// floor (queue_trim.go), and written without the Next filter; LockLost otherwise.
func (s *Store) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	const op = "aerospike.CommitQueueOffset"
	if err := checkQueueGroup(name, group, p); err != nil {
		return err
	}
	if off.Attempts < 0 {
		return driver.Errorf(dcsync.InvalidArgument, op, "attempts %d is negative", off.Attempts)
	}
	if off.Token > 1<<63-1 || off.Next > 1<<63-1 || off.Version > 1<<63-1 {
		return driver.Errorf(dcsync.InvalidArgument, op, "token %d, next %d or version %d is beyond int64", off.Token, off.Next, off.Version)
	}
	if err := driver.ValidateQueueMarks(op, off); err != nil {
		return err
	}
	if _, err := s.queueDedup(ctx, op, name); err != nil {
		return err
	}
	return s.commitOffset(ctx, op, name, group, p, off, commitSent{code: types.NO_RESPONSE})
}

// commitSent is what became of a first try of a commit sent before commitOffset (in
// CommitQueueOffsets' batch): the try's result code (OK, FILTERED_OUT or
// KEY_NOT_FOUND_ERROR), or NO_RESPONSE when none was sent or it got no outcome; and
// whether a try may have been applied without an answer saying so (in doubt).
type commitSent struct {
	code  types.ResultCode
	doubt bool
}

// commitOps are the operations that write off's bins (all but the token).
func commitOps(off driver.QueueOffset) []*as.Operation {
	return []*as.Operation{
		as.PutOp(as.NewBin(qbNext, int64(off.Next))), as.PutOp(as.NewBin(qbAtt, off.Attempts)),
		as.PutOp(as.NewBin(qbHeld, heldValue(off.Held))), as.PutOp(as.NewBin(qbVer, int64(off.Version))),
		as.PutOp(as.NewBin(qbMarks, marksValue(off.Marks))),
	}
}

// commitFilter is the condition of a commit of off: the stored token is off.Token and
// the stored version below off.Version and, unless rewind (the rewind is pinned), the
// stored Next not above off.Next: the state the commit replaces.
func commitFilter(off driver.QueueOffset, rewind bool) *as.Expression {
	f := as.ExpAnd(
		as.ExpEq(as.ExpIntBin(qbToken), as.ExpIntVal(int64(off.Token))),
		as.ExpLess(binOr0(qbVer), as.ExpIntVal(int64(off.Version))))
	if !rewind {
		f = as.ExpAnd(f, as.ExpLessEq(binOr0(qbNext), as.ExpIntVal(int64(off.Next))))
	}
	return f
}

// commitOffset is CommitQueueOffset after its checks, for CommitQueueOffset and for
// each commit of CommitQueueOffsets: sent is what became of a first try already sent
// (its outcome is decided on as this function decides on its own try's; with no
// outcome, the write is sent again, in doubt when sent.doubt says so).
func (s *Store) commitOffset(ctx context.Context, op, name, group string, p int, off driver.QueueOffset, sent commitSent) error {
	lost := func(cur driver.QueueOffset) error {
		return driver.Errorf(dcsync.LockLost, op, "partition %d of queue %q group %q: the stored offset (token %d, version %d) does not take version %d of token %d",
			p, name, group, cur.Token, cur.Version, off.Version, off.Token)
	}
	if off.Token == 0 {
		return lost(driver.QueueOffset{})
	}
	key := s.offsetKey(name, group, p)
	ops := commitOps(off)
	code, doubt := sent.code, sent.doubt
	// write writes off, filtered on the state it replaces (commitFilter).
	write := func(rewind bool) error {
		return s.retry(ctx, op, true, func(a *attempt) error {
			doubt = doubt || a.inDoubt
			wp := s.writePolicy(ctx, as.TTLDontUpdate)
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.FilterExpression = commitFilter(off, rewind)
			_, err := s.client.Operate(wp, key, ops...)
			code = types.OK
			if rc, ok := resultCode(err); ok && (rc == types.FILTERED_OUT || rc == types.KEY_NOT_FOUND_ERROR) {
				code, err = rc, nil
			}
			return err
		})
	}
	for rewind := false; ; rewind = true {
		if rewind || code == types.NO_RESPONSE {
			if err := write(rewind); err != nil {
				return err
			}
		}
		if code == types.OK {
			return nil
		}
		var cur driver.QueueOffset
		if code == types.FILTERED_OUT {
			rec, err := s.getRecord(ctx, op, key)
			if err != nil {
				return err
			}
			if rec != nil {
				cur = offsetOf(rec.Bins)
			}
			if cur == off {
				return nil
			}
			if doubt && cur.Token != off.Token {
				// A try in doubt may have landed before the new owner's claim (which keeps
				// Next and Version): the outcome is unknown, not refused.
				return driver.Errorf(dcsync.Connection, op, "partition %d of queue %q group %q: outcome unknown: a try in doubt may have been applied before token %d took the partition", p, name, group, cur.Token)
			}
			if !rewind && cur.Token == off.Token && cur.Version < off.Version && off.Next < cur.Next {
				// A rewind: pinned before it is written, so that no trim passes it
				// (queue_trim.go); refused below the floor.
				if err := s.pinRewind(ctx, op, name, group, p, cur, off); err != nil {
					return err
				}
				if err := queueHook(name, "rewind-pinned"); err != nil {
					return err
				}
				continue
			}
		}
		return lost(cur)
	}
}

// ReadQueueOffsets implements driver.QueueStore: one batch read.
func (s *Store) ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]driver.QueueOffset, error) {
	const op = "aerospike.ReadQueueOffsets"
	if err := checkQueueGroup(name, group, 0); err != nil {
		return nil, err
	}
	for _, p := range ps {
		if err := driver.ValidateQueuePartition(p); err != nil {
			return nil, err
		}
	}
	if _, err := s.queueDedup(ctx, op, name); err != nil {
		return nil, err
	}
	recs := make([]as.BatchRecordIfc, len(ps))
	for i, p := range ps {
		recs[i] = as.NewBatchRead(nil, s.offsetKey(name, group, p), offsetBins)
	}
	if err := s.runBatch(ctx, op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, err
	}
	out := make([]driver.QueueOffset, len(ps))
	for i := range ps {
		br := recs[i].BatchRec()
		if br.ResultCode == types.OK && br.Record != nil {
			out[i] = offsetOf(br.Record.Bins)
		}
	}
	return out, nil
}
