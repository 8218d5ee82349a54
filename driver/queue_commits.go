package driver

import (
	"context"
	"math"

	"github.com/dcsync/dcsync"
)

// QueueCommit is one record of a [QueueCommitter.CommitQueueOffsets] call: write Off
// to the group's offset in partition P, as CommitQueueOffset would.
type QueueCommit struct {
	P   int
	Off QueueOffset
}

// QueueCommitter is implemented by stores that can write the offsets of many
// partitions of one group in one round trip per store node (an Ack spanning several
// partitions; the Held writes of a consumer's first delivery). Each commit's outcome
// is exactly that of CommitQueueOffset for it: applied only when the stored token is
// Off.Token and the stored Version is below Off.Version; nil when the stored offset
// already equals Off; LockLost, changing nothing, when refused; a Connection error
// when an attempt failed in doubt and another token now owns the partition; a rewind
// refused below the Floor, and held back from every trim when stored. The records are
// independent: one refused, in doubt or failed changes nothing of the others, and an
// attempt of the batch that lands late, after later writes, changes nothing (each
// record's write is conditioned on the state it replaces). Partitions are distinct.
// Result i belongs to commits[i]. The returned error is for the batch as a whole
// (validation of any commit before any I/O, an unknown queue, the context ending
// before anything was sent): nothing was written then; per-commit failures are in the
// results.
type QueueCommitter interface {
	CommitQueueOffsets(ctx context.Context, name, group string, commits []QueueCommit) ([]error, error)
}

// CommitQueueOffsets writes every commit through s's QueueCommitter when it has one,
// else one CommitQueueOffset at a time; see [QueueCommitter].
func CommitQueueOffsets(ctx context.Context, s QueueStore, name, group string, commits []QueueCommit) ([]error, error) {
	if b, ok := s.(QueueCommitter); ok {
		return b.CommitQueueOffsets(ctx, name, group, commits)
	}
	if err := ValidateQueueCommits(name, group, commits); err != nil {
		return nil, err
	}
	out := make([]error, len(commits))
	for i, c := range commits {
		if err := ctx.Err(); err != nil && i == 0 {
			return nil, Wrap(err, dcsync.Internal, "driver.CommitQueueOffsets")
		}
		out[i] = s.CommitQueueOffset(ctx, name, group, c.P, c.Off)
		if i == 0 && dcsync.CodeOf(out[i]) == dcsync.NotFound {
			return nil, out[i] // an unknown queue fails the batch as a whole
		}
	}
	return out, nil
}

// ValidateQueueCommits checks the arguments of a CommitQueueOffsets call as each
// CommitQueueOffset checks its own (the queue and group names, each partition, each
// offset's Attempts and Marks), and that no partition appears twice.
func ValidateQueueCommits(name, group string, commits []QueueCommit) error {
	const op = "driver.CommitQueueOffsets"
	if err := ValidateID("queue", name); err != nil {
		return err
	}
	if err := ValidateID("group", group); err != nil {
		return err
	}
	seen := make(map[int]bool, len(commits))
	for _, c := range commits {
		if err := ValidateQueuePartition(c.P); err != nil {
			return err
		}
		if seen[c.P] {
			return Errorf(dcsync.InvalidArgument, op, "partition %d appears twice", c.P)
		}
		seen[c.P] = true
		if c.Off.Attempts < 0 || c.Off.Attempts > math.MaxInt32 {
			return Errorf(dcsync.InvalidArgument, op, "partition %d: attempts %d out of range", c.P, c.Off.Attempts)
		}
		if err := ValidateQueueMarks(op, c.Off); err != nil {
			return err
		}
	}
	return nil
}
