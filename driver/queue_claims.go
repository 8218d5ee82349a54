package driver

import (
	"context"

	"github.com/dcsync/dcsync"
)

// QueueClaim is one partition of a [QueueClaimer.ClaimQueuePartitions] call: make
// Token the owner of the group's offset in partition P.
type QueueClaim struct {
	P     int
	Token uint64
}

// QueueClaimResult is the outcome of one claim of a batch: what ClaimQueuePartition
// would have returned for it.
type QueueClaimResult struct {
	Offset QueueOffset
	Err    error
}

// QueueClaimer is implemented by stores that can claim many partitions of one group in
// one round trip per store node (a consumer taking many partitions at once). Each
// claim's outcome is exactly that of ClaimQueuePartition for it (the token written
// only when above the stored one, an equal token writing nothing, a lower one
// LockLost with the stored offset), as if the single operations were applied one
// after another in the order of the claims. Result i belongs to claims[i]. The
// returned error is for the batch as a whole (validation of any claim before any
// I/O, an unknown queue, the context ending before anything was sent); per-claim
// failures are in the results.
type QueueClaimer interface {
	ClaimQueuePartitions(ctx context.Context, name, group string, claims []QueueClaim) ([]QueueClaimResult, error)
}

// ClaimQueuePartitions claims every partition of claims through s's QueueClaimer when
// it has one, else one ClaimQueuePartition at a time; see [QueueClaimer].
func ClaimQueuePartitions(ctx context.Context, s QueueStore, name, group string, claims []QueueClaim) ([]QueueClaimResult, error) {
	if b, ok := s.(QueueClaimer); ok {
		return b.ClaimQueuePartitions(ctx, name, group, claims)
	}
	if err := ValidateQueueClaims(name, group, claims); err != nil {
		return nil, err
	}
	out := make([]QueueClaimResult, len(claims))
	for i, c := range claims {
		if err := ctx.Err(); err != nil && i == 0 {
			return nil, Wrap(err, dcsync.Internal, "driver.ClaimQueuePartitions")
		}
		out[i].Offset, out[i].Err = s.ClaimQueuePartition(ctx, name, group, c.P, c.Token)
	}
	return out, nil
}

// ValidateQueueClaims checks the arguments of a ClaimQueuePartitions call as each
// ClaimQueuePartition checks its own: the queue and group names, each partition and
// each token (from 1, the first any lock gives, to 2^63-1, as every stored
// sequence number).
func ValidateQueueClaims(name, group string, claims []QueueClaim) error {
	const op = "driver.ClaimQueuePartitions"
	if err := ValidateID("queue", name); err != nil {
		return err
	}
	if err := ValidateID("group", group); err != nil {
		return err
	}
	for _, c := range claims {
		if err := ValidateQueuePartition(c.P); err != nil {
			return err
		}
		if c.Token == 0 || c.Token > 1<<63-1 {
			return Errorf(dcsync.InvalidArgument, op, "token %d is outside [1, %d]", c.Token, uint64(1<<63-1))
		}
	}
	return nil
}
