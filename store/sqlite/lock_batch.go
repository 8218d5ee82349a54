package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

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
	err := s.writeUrgent(ctx, op, func(tx *sql.Tx) error {
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
		live, err := liveLocks(ctx, conn, keys, now)
		if err != nil {
			return err
		}
		for i, k := range keys {
			if st, ok := live[lockID{lockFarm(k), k.Client, k.Name, k.Level}]; ok {
				out[i].State = st
				continue
			}
			out[i].Err = driver.Errorf(dcsync.NotFound, "sqlite.InspectLock", "%s is free", k)
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
		stmts := newTxStmts(tx)
		defer stmts.Close()
		for i, r := range reqs {
			st, err := acquireTx(ctx, stmts, r.Key, r.Owner, r.TTL, now)
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
		stmts := newTxStmts(tx)
		defer stmts.Close()
		for i, r := range reqs {
			err := releaseTx(ctx, stmts, r.Key, r.Owner, now)
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

// lockID is a lock's primary key in dcsync_locks.
type lockID struct {
	farm, client, name string
	level              dcsync.Level
}

// inspectChunk is how many names one query of liveLocks asks for.
const inspectChunk = 256

// liveLocks reads the unexpired locks of keys, with one query per inspectChunk names
// of one level, farm and client (a membership read of the queue is one or two), not
// one per key: on a read of 96 member slots by each of 64 consumers every poll
// interval, a query per key took most of the machine's two cores.
func liveLocks(ctx context.Context, conn *sql.Conn, keys []dcsync.Key, now time.Time) (map[lockID]driver.LockState, error) {
	type scope struct {
		level        dcsync.Level
		farm, client string
	}
	names := map[scope][]string{}
	var order []scope
	for _, k := range keys {
		sc := scope{k.Level, lockFarm(k), k.Client}
		if _, ok := names[sc]; !ok {
			order = append(order, sc)
		}
		names[sc] = append(names[sc], k.Name)
	}
	out := make(map[lockID]driver.LockState, len(keys))
	for _, sc := range order {
		ns := names[sc]
		for len(ns) > 0 {
			chunk := ns[:min(len(ns), inspectChunk)]
			ns = ns[len(chunk):]
			args := make([]any, 0, 4+len(chunk))
			args = append(args, int(sc.level), sc.farm, sc.client, now.UnixMilli())
			for _, n := range chunk {
				args = append(args, n)
			}
			q := `SELECT name, owner, token, expires_ms FROM dcsync_locks WHERE level = ? AND farm = ? AND client = ? AND expires_ms > ?
				AND name IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`
			rows, err := conn.QueryContext(ctx, q, args...)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var name string
				var st driver.LockState
				var exp int64
				if err := rows.Scan(&name, &st.Owner, &st.Token, &exp); err != nil {
					rows.Close()
					return nil, err
				}
				st.Expires = time.UnixMilli(exp)
				out[lockID{sc.farm, sc.client, name, sc.level}] = st
			}
			err = rows.Err()
			if cerr := rows.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
