package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.LockBatcher = (*Store)(nil)

// RefreshLocks implements driver.LockBatcher: every refresh of reqs in one IMMEDIATE
// transaction, each with RefreshLock's outcome (the same conditional UPDATE, at one
// instant, now). A lease that is not its owner's gets LockLost and leaves the others
// alone; a database error rolls the whole transaction back and fails the batch, as does
// any invalid request, before anything is written.
func (s *Store) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	const op = "sqlite.RefreshLocks"
	for _, r := range reqs {
		if err := driver.CheckLease(r.Key, r.Owner, r.TTL); err != nil {
			return nil, err
		}
	}
	out := make([]driver.LockResult, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		clear(out) // a try that failed busy is run again
		stmt, err := tx.PrepareContext(ctx, refreshSQL)
		if err != nil {
			return err
		}
		defer stmt.Close()
		now := s.now()
		for i, r := range reqs {
			st, err := refreshed(stmt.QueryRowContext(ctx, refreshArgs(r.Key, r.Owner, r.TTL, now)...), r.Key, r.Owner, r.TTL, now)
			var de *dcsync.Error
			switch {
			case err == nil:
				out[i].State = st
			case errors.As(err, &de):
				out[i].Err = err
			default:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InspectLocks implements driver.LockBatcher: every lock of keys read in one deferred
// transaction (one snapshot, no write lock), each with InspectLock's outcome (NotFound
// for a free lock). Any invalid key fails the whole batch before any read.
func (s *Store) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	const op = "sqlite.InspectLocks"
	for _, k := range keys {
		if err := driver.ValidateKey("lock", k); err != nil {
			return nil, err
		}
	}
	out := make([]driver.LockResult, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	err := s.retry(ctx, op, func() error {
		clear(out)
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
			return err
		}
		defer conn.ExecContext(context.Background(), "ROLLBACK")
		now := s.now()
		for i, k := range keys {
			st, ok, err := liveLock(ctx, conn, k, now)
			switch {
			case err != nil:
				return err
			case ok:
				out[i].State = st
			default:
				out[i].Err = driver.Errorf(dcsync.NotFound, "sqlite.InspectLock", "%s is free", k)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

var _ driver.LockMover = (*Store)(nil)

// AcquireLocks implements driver.LockMover: every acquire of reqs in one IMMEDIATE
// transaction, in order, each with AcquireLock's outcome (the same reads and writes,
// at one instant, now). A lock held by anyone gets its holder's state and
// LockUnavailable and leaves the others alone; a database error rolls the whole
// transaction back and fails the batch (no token is spent, no lock taken), as does any
// invalid request, before anything is written.
func (s *Store) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	const op = "sqlite.AcquireLocks"
	for _, r := range reqs {
		if err := driver.CheckLease(r.Key, r.Owner, r.TTL); err != nil {
			return nil, err
		}
	}
	out := make([]driver.LockResult, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		clear(out) // a try that failed busy is run again
		now := s.now()
		for i, r := range reqs {
			st, err := acquireTx(ctx, tx, r.Key, r.Owner, r.TTL, now)
			var de *dcsync.Error
			switch {
			case err == nil:
				out[i].State = st
			case errors.As(err, &de):
				out[i] = driver.LockResult{State: st, Err: err}
			default:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseLocks implements driver.LockMover: every release of reqs in one IMMEDIATE
// transaction, in order, each with ReleaseLock's outcome (LockLost for a lock the owner
// does not hold, which stays as it is). A database error rolls the whole transaction
// back and fails the batch, as does any invalid request, before anything is written.
func (s *Store) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	const op = "sqlite.ReleaseLocks"
	for _, r := range reqs {
		if err := driver.CheckLock(r.Key, r.Owner, 0); err != nil {
			return nil, err
		}
	}
	out := make([]driver.LockResult, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		clear(out)
		now := s.now()
		for i, r := range reqs {
			err := releaseTx(ctx, tx, r.Key, r.Owner, now)
			var de *dcsync.Error
			switch {
			case err == nil:
			case errors.As(err, &de):
				out[i].Err = err
			default:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
