package sqlite

import (
	"context"
	"database/sql"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueClaimer = (*Store)(nil)

// ClaimQueuePartitions implements driver.QueueClaimer: every claim in one IMMEDIATE
// transaction, in order, each with ClaimQueuePartition's outcome (the same read and
// the same conditional write). A claim with a lower token than the stored one gets
// LockLost and the stored offset and leaves the others alone; a database error rolls
// the whole transaction back and fails the batch, as do an invalid claim and an
// unknown queue, before anything is written.
func (s *Store) ClaimQueuePartitions(ctx context.Context, name, group string, claims []driver.QueueClaim) ([]driver.QueueClaimResult, error) {
	const op = "sqlite.ClaimQueuePartitions"
	if err := driver.ValidateQueueClaims(name, group, claims); err != nil {
		return nil, err
	}
	out := make([]driver.QueueClaimResult, len(claims))
	if len(claims) == 0 {
		return out, nil
	}
	if err := s.ensureOffsetColumns(ctx, op); err != nil {
		return nil, err
	}
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		clear(out) // a try that failed busy is run again
		m, err := s.queue(ctx, tx, op, name)
		if err != nil {
			return err
		}
		stmts := newTxStmts(tx)
		defer stmts.Close()
		for i, c := range claims {
			off, _, err := s.readOffset(ctx, stmts, m.id, group, c.P)
			if err != nil {
				return err
			}
			if c.Token < off.Token {
				out[i] = driver.QueueClaimResult{Offset: off, Err: driver.Errorf(dcsync.LockLost, "sqlite.ClaimQueuePartition",
					"queue %q group %q partition %d is owned by token %d, above %d", name, group, c.P, off.Token, c.Token)}
				continue
			}
			if c.Token > off.Token {
				if _, err := stmts.ExecContext(ctx, `INSERT INTO dcsync_queue_offsets (q, g, p, token, next, attempts, held, version, marks)
					VALUES (?, ?, ?, ?, 0, 0, 0, 0, x'') ON CONFLICT (q, g, p) DO UPDATE SET token = excluded.token WHERE token < excluded.token`,
					m.id, group, c.P, int64(c.Token)); err != nil {
					return err
				}
			}
			off.Token = c.Token
			out[i].Offset = off
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
