package aerospike

import (
	"context"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueClaimer = (*Store)(nil)

// ClaimQueuePartitions implements driver.QueueClaimer: every claim's write is
// ClaimQueuePartition's (one operate filtered on the stored token being below the
// claim's, reading the offset and writing the token only), all in one BatchOperate
// (one command per server node); the claims filtered out have their offset records
// read in one more batch: the claim's own token there (an earlier try landed, or the
// claim was made before) returns the stored offset, a greater one is LockLost. A try
// that lands late, after a retry and the owner's commits, is filtered out, as the
// single claim's is. A partition named a second time in the batch is claimed by
// ClaimQueuePartition after the batch, in the order of the claims. Result i belongs
// to claims[i].
func (s *Store) ClaimQueuePartitions(ctx context.Context, name, group string, claims []driver.QueueClaim) ([]driver.QueueClaimResult, error) {
	const op = "aerospike.ClaimQueuePartitions"
	const cop = "aerospike.ClaimQueuePartition"
	if err := driver.ValidateQueueClaims(name, group, claims); err != nil {
		return nil, err
	}
	if err := checkQueueGroup(name, group, 0); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, driver.Errorf(dcsync.Connection, op, "%w", err)
	}
	inc, err := s.queueInc(ctx, op, name)
	if err != nil {
		return nil, err
	}
	out := make([]driver.QueueClaimResult, len(claims))
	alone := make([]bool, len(claims))
	seen := make(map[int]bool, len(claims))
	var recs []as.BatchRecordIfc
	var idx []int
	for i, c := range claims {
		if seen[c.P] {
			alone[i] = true
			continue
		}
		seen[c.P] = true
		ops := make([]*as.Operation, 0, len(offsetBins)+2)
		for _, b := range offsetBins {
			ops = append(ops, as.GetBinOp(b))
		}
		ops = withInc(append(ops, as.PutOp(as.NewBin(qbToken, int64(c.Token)))), inc)
		wp := as.NewBatchWritePolicy()
		wp.Expiration = as.TTLDontExpire
		wp.FilterExpression = as.ExpLess(binOr0(qbToken), as.ExpIntVal(int64(c.Token)))
		recs, idx = append(recs, as.NewBatchWrite(wp, s.offsetKey(name, group, c.P), ops...)), append(idx, i)
	}
	err = s.moveBatch(ctx, cop, recs, nil, types.FILTERED_OUT)
	var reads []as.BatchRecordIfc
	var check []int
	for j, i := range idx {
		br := recs[j].BatchRec()
		switch br.ResultCode {
		case types.OK:
			var off driver.QueueOffset
			if br.Record != nil {
				off = offsetOf(br.Record.Bins)
			}
			off.Token = claims[i].Token
			out[i].Offset = off
		case types.FILTERED_OUT:
			reads = append(reads, as.NewBatchRead(nil, br.Key, nil))
			check = append(check, i)
		default:
			out[i].Err = s.moveErr(cop, br, err)
		}
	}
	err = s.moveBatch(ctx, cop, reads, nil, types.KEY_NOT_FOUND_ERROR)
	for j, i := range check {
		br := reads[j].BatchRec()
		c := claims[i]
		switch {
		case br.ResultCode == types.KEY_NOT_FOUND_ERROR:
		case !final(br):
			out[i].Err = s.moveErr(cop, br, err)
			continue
		default:
			out[i].Offset = offsetOf(br.Record.Bins)
		}
		if out[i].Offset.Token != c.Token {
			out[i].Err = driver.Errorf(dcsync.LockLost, cop, "partition %d of queue %q group %q is owned by token %d, above %d",
				c.P, name, group, out[i].Offset.Token, c.Token)
		}
	}
	for i, c := range claims {
		if alone[i] {
			out[i].Offset, out[i].Err = s.ClaimQueuePartition(ctx, name, group, c.P, c.Token)
		}
	}
	return out, nil
}
