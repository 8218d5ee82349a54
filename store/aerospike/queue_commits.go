package aerospike

import (
	"context"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueCommitter = (*Store)(nil)

// CommitQueueOffsets implements driver.QueueCommitter: every commit's first write is
// CommitQueueOffset's (the same operations, filtered on the same state it replaces:
// the stored token is the commit's, the stored version below its Version, the stored
// Next not above its Next; update only), all in one BatchOperate, which the client
// sends as one command per server node. Each record's outcome then goes through
// CommitQueueOffset's own decision (commitOffset): applied is done; filtered out reads
// the record (already there: nil; a rewind: pinned, then written alone; else
// LockLost); a record without an outcome (a timeout, a dropped connection, a busy
// server) is written again alone, in doubt when its batch try may have been applied,
// so that an attempt in doubt followed by another owner's claim is a Connection error
// (outcome unknown), as the single commit's is. A try of the batch that lands late is
// filtered out as the single commit's is. A single commit is CommitQueueOffset's write
// itself. Result i belongs to commits[i].
func (s *Store) CommitQueueOffsets(ctx context.Context, name, group string, commits []driver.QueueCommit) ([]error, error) {
	const op = "aerospike.CommitQueueOffsets"
	const cop = "aerospike.CommitQueueOffset"
	if err := driver.ValidateQueueCommits(name, group, commits); err != nil {
		return nil, err
	}
	for _, c := range commits {
		if o := c.Off; o.Token > 1<<63-1 || o.Next > 1<<63-1 || o.Version > 1<<63-1 {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "partition %d: token %d, next %d or version %d is beyond int64", c.P, o.Token, o.Next, o.Version)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, driver.Errorf(dcsync.Connection, op, "%w", err)
	}
	if _, err := s.queueDedup(ctx, op, name); err != nil {
		return nil, err
	}
	out := make([]error, len(commits))
	sent := make([]commitSent, len(commits))
	var recs []as.BatchRecordIfc
	var idx []int
	for i, c := range commits {
		sent[i].code = types.NO_RESPONSE
		if c.Off.Token == 0 {
			continue // refused without a write, as by CommitQueueOffset
		}
		wp := as.NewBatchWritePolicy()
		wp.RecordExistsAction = as.UPDATE_ONLY
		wp.Expiration = as.TTLDontUpdate
		wp.FilterExpression = commitFilter(c.Off, false)
		recs = append(recs, as.NewBatchWrite(wp, s.offsetKey(name, group, c.P), commitOps(c.Off)...))
		idx = append(idx, i)
	}
	if len(recs) > 1 {
		errs := make([]error, len(recs))
		if err := s.retry(ctx, op, true, func(*attempt) error {
			s.sendCommits(ctx, recs, errs)
			return nil
		}); err != nil {
			return nil, err // the store is closed or ctx ended: nothing was sent
		}
		for j, i := range idx {
			br := recs[j].BatchRec()
			switch {
			case br.ResultCode == types.OK && br.Record != nil,
				br.ResultCode == types.FILTERED_OUT, br.ResultCode == types.KEY_NOT_FOUND_ERROR:
				sent[i].code = br.ResultCode
				continue
			}
			err := errs[j]
			if br.ResultCode != types.NO_RESPONSE && br.ResultCode != types.OK {
				err = batchErr(br)
			} else if err == nil {
				err = &as.AerospikeError{ResultCode: types.NO_RESPONSE}
			}
			if !transient(err) {
				out[i] = s.serverError(cop, err) // as CommitQueueOffset's try would end
				continue
			}
			sent[i].doubt = br.InDoubt || !surelyNotApplied(err)
		}
	}
	for i, c := range commits {
		if out[i] == nil {
			out[i] = s.commitOffset(ctx, cop, name, group, c.P, c.Off, sent[i])
		}
	}
	return out, nil
}

// sendCommits sends recs in one BatchOperate (one command per server node), in halves
// while the server refuses a command as too many records (its batch-max-requests; no
// limit by default) and none of it ran. errs[i] is set to the error of the call that
// sent recs[i] when it failed.
func (s *Store) sendCommits(ctx context.Context, recs []as.BatchRecordIfc, errs []error) {
	for _, r := range recs {
		br := r.BatchRec()
		br.Record, br.Err, br.ResultCode, br.InDoubt = nil, nil, types.NO_RESPONSE, false
	}
	err := s.client.BatchOperate(s.batchPolicy(ctx), recs)
	if err == nil {
		return
	}
	rc, ok := resultCode(err)
	switch {
	case ok && rc == types.BATCH_MAX_REQUESTS_EXCEEDED && len(recs) > 1 && noOutcome(recs):
		h := len(recs) / 2
		s.sendCommits(ctx, recs[:h], errs[:h])
		s.sendCommits(ctx, recs[h:], errs[h:])
		return
	case ok && len(recs) == 1 && recs[0].BatchRec().ResultCode == types.NO_RESPONSE &&
		(rc == types.FILTERED_OUT || rc == types.KEY_NOT_FOUND_ERROR):
		recs[0].BatchRec().ResultCode = rc // a one-record batch's error may be the record's own
		return
	}
	for i := range errs {
		errs[i] = err
	}
}
