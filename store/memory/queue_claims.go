package memory

import (
	"context"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueClaimer = (*Store)(nil)

// ClaimQueuePartitions implements driver.QueueClaimer: every claim under one hold of
// the store's mutex, in order, each with ClaimQueuePartition's outcome. Any invalid
// claim, or an unknown queue, fails the whole batch before anything changes.
func (s *Store) ClaimQueuePartitions(ctx context.Context, name, group string, claims []driver.QueueClaim) ([]driver.QueueClaimResult, error) {
	const op = "memory.ClaimQueuePartitions"
	if err := s.begin(ctx, driver.ValidateQueueClaims(name, group, claims)); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	q, err := s.queue(op, name)
	if err != nil {
		return nil, err
	}
	out := make([]driver.QueueClaimResult, len(claims))
	for i, c := range claims {
		id := offsetID{group, c.P}
		off := q.offsets[id]
		if c.Token < off.Token {
			out[i] = driver.QueueClaimResult{Offset: off, Err: driver.Errorf(dcsync.LockLost, "memory.ClaimQueuePartition",
				"partition %d of queue %q group %q is owned by token %d, above %d", c.P, name, group, off.Token, c.Token)}
			continue
		}
		off.Token = c.Token
		q.offsets[id] = off
		out[i].Offset = off
	}
	return out, nil
}
