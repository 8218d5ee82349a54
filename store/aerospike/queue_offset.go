package aerospike

import (
	"context"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
)

func checkQueueGroup(name, group string, p int) error {
	if err := checkQueueName(name); err != nil {
		return err
	}
	if err := dcsync.ValidateID("group", group); err != nil {
		return err
	}
	return dcsync.ValidateQueuePartition(p)
}

func offsetOf(bins as.BinMap) dcsync.QueueOffset {
	off := dcsync.QueueOffset{Token: uintOf(bins[qbToken]), Next: uintOf(bins[qbNext])}
	if n, ok := intOf(bins[qbAtt]); ok {
		off.Attempts = int(n)
	}
	if h, ok := intOf(bins[qbHeld]); ok {
		off.Held = h != 0
	}
	return off
}

func heldValue(h bool) int {
	if h {
		return 1
	}
	return 0
}

// ClaimQueuePartition implements dcsync.QueueStore: one operate, filtered on the stored
// token being at most token, reads the offset and then writes the token and Held. A
// refused claim reads the offset for LockLost.
func (s *Store) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (dcsync.QueueOffset, error) {
	const op = "aerospike.ClaimQueuePartition"
	if err := checkQueueGroup(name, group, p); err != nil {
		return dcsync.QueueOffset{}, err
	}
	if token == 0 || token > 1<<63-1 {
		return dcsync.QueueOffset{}, dcsync.Errorf(dcsync.InvalidArgument, op, "token %d cannot own a partition", token)
	}
	if _, err := s.queueDedup(ctx, op, name); err != nil {
		return dcsync.QueueOffset{}, err
	}
	key := s.offsetKey(name, group, p)
	rec, code, err := s.write(ctx, op, func() *as.WritePolicy {
		wp := s.writePolicy(ctx, as.TTLDontExpire)
		wp.FilterExpression = as.ExpLessEq(binOr0(qbToken), as.ExpIntVal(int64(token)))
		return wp
	}, key, []*as.Operation{
		as.GetBinOp(qbToken), as.GetBinOp(qbNext), as.GetBinOp(qbAtt), as.GetBinOp(qbHeld),
		as.PutOp(as.NewBin(qbToken, int64(token))), as.PutOp(as.NewBin(qbHeld, 1)),
	}, types.FILTERED_OUT)
	if err != nil {
		return dcsync.QueueOffset{}, err
	}
	if code == types.OK {
		var off dcsync.QueueOffset
		if rec != nil {
			off = offsetOf(rec.Bins)
		}
		off.Token = token
		return off, nil
	}
	cur, err := s.getRecord(ctx, op, key)
	if err != nil {
		return dcsync.QueueOffset{}, err
	}
	var off dcsync.QueueOffset
	if cur != nil {
		off = offsetOf(cur.Bins)
	}
	return off, dcsync.Errorf(dcsync.LockLost, op, "partition %d of queue %q group %q is owned by token %d, above %d", p, name, group, off.Token, token)
}

// CommitQueueOffset implements dcsync.QueueStore: one write filtered on the stored
// token (a retry writes the same values again).
func (s *Store) CommitQueueOffset(ctx context.Context, name, group string, p int, off dcsync.QueueOffset) error {
	const op = "aerospike.CommitQueueOffset"
	if err := checkQueueGroup(name, group, p); err != nil {
		return err
	}
	if off.Attempts < 0 {
		return dcsync.Errorf(dcsync.InvalidArgument, op, "attempts %d is negative", off.Attempts)
	}
	if off.Token > 1<<63-1 || off.Next > 1<<63-1 {
		return dcsync.Errorf(dcsync.InvalidArgument, op, "token %d or next %d is beyond int64", off.Token, off.Next)
	}
	if _, err := s.queueDedup(ctx, op, name); err != nil {
		return err
	}
	lost := func() error {
		return dcsync.Errorf(dcsync.LockLost, op, "partition %d of queue %q group %q is not owned by token %d", p, name, group, off.Token)
	}
	if off.Token == 0 {
		return lost()
	}
	_, code, err := s.write(ctx, op, func() *as.WritePolicy {
		wp := s.writePolicy(ctx, as.TTLDontUpdate)
		wp.RecordExistsAction = as.UPDATE_ONLY
		wp.FilterExpression = as.ExpEq(as.ExpIntBin(qbToken), as.ExpIntVal(int64(off.Token)))
		return wp
	}, s.offsetKey(name, group, p), []*as.Operation{
		as.PutOp(as.NewBin(qbNext, int64(off.Next))), as.PutOp(as.NewBin(qbAtt, off.Attempts)),
		as.PutOp(as.NewBin(qbHeld, heldValue(off.Held))),
	}, types.FILTERED_OUT, types.KEY_NOT_FOUND_ERROR)
	if err != nil {
		return err
	}
	if code != types.OK {
		return lost()
	}
	return nil
}

// ReadQueueOffsets implements dcsync.QueueStore: one batch read.
func (s *Store) ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]dcsync.QueueOffset, error) {
	const op = "aerospike.ReadQueueOffsets"
	if err := checkQueueGroup(name, group, 0); err != nil {
		return nil, err
	}
	for _, p := range ps {
		if err := dcsync.ValidateQueuePartition(p); err != nil {
			return nil, err
		}
	}
	if _, err := s.queueDedup(ctx, op, name); err != nil {
		return nil, err
	}
	recs := make([]as.BatchRecordIfc, len(ps))
	for i, p := range ps {
		recs[i] = as.NewBatchRead(nil, s.offsetKey(name, group, p), []string{qbToken, qbNext, qbAtt, qbHeld})
	}
	if err := s.runBatch(ctx, op, false, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, err
	}
	out := make([]dcsync.QueueOffset, len(ps))
	for i := range ps {
		br := recs[i].BatchRec()
		if br.ResultCode == types.OK && br.Record != nil {
			out[i] = offsetOf(br.Record.Bins)
		}
	}
	return out, nil
}
