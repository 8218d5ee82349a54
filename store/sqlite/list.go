package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var (
	_ driver.LockLister   = (*Store)(nil)
	_ driver.LatchLister  = (*Store)(nil)
	_ driver.LatchDeleter = (*Store)(nil)
)

// ListLocks implements driver.LockLister: the live locks of client, sorted by level,
// farm and name (one query on the primary key's client column; the table's key starts
// with level and farm, so this reads the whole lock table, which is small). An XDC lock
// is listed with an empty Farm.
func (s *Store) ListLocks(ctx context.Context, client string) ([]driver.LockInfo, error) {
	const op = "sqlite.ListLocks"
	if err := driver.ValidateID("client", client); err != nil {
		return nil, err
	}
	var out []driver.LockInfo
	err := s.retry(ctx, op, func() error {
		out = out[:0]
		rows, err := s.db.QueryContext(ctx, `SELECT level, farm, name, owner, token, expires_ms FROM dcsync_locks
			WHERE client = ? AND expires_ms > ? ORDER BY level, farm, name`, client, s.now().UnixMilli())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var li driver.LockInfo
			var level int
			var exp int64
			if err := rows.Scan(&level, &li.Key.Farm, &li.Key.Name, &li.Owner, &li.Token, &exp); err != nil {
				return err
			}
			li.Key.Level, li.Key.Client, li.Expires = dcsync.Level(level), client, time.UnixMilli(exp)
			out = append(out, li)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListLatches implements driver.LatchLister: one entry per live farm cell of client's
// latches, sorted by name and farm.
func (s *Store) ListLatches(ctx context.Context, client string) ([]driver.LatchInfo, error) {
	const op = "sqlite.ListLatches"
	if err := driver.ValidateID("client", client); err != nil {
		return nil, err
	}
	var out []driver.LatchInfo
	err := s.retry(ctx, op, func() error {
		out = out[:0]
		rows, err := s.db.QueryContext(ctx, `SELECT name, farm, count, expires_ms FROM dcsync_latch_cells
			WHERE client = ? AND expires_ms > ? ORDER BY name, farm`, client, s.now().UnixMilli())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			li := driver.LatchInfo{Key: dcsync.Key{Level: dcsync.DC, Client: client}}
			var exp int64
			if err := rows.Scan(&li.Key.Name, &li.Key.Farm, &li.Count, &exp); err != nil {
				return err
			}
			li.Expires = time.UnixMilli(exp)
			out = append(out, li)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteLatch implements driver.LatchDeleter: at level DC it deletes k.Farm's cell, at
// level XDC every cell of k's name, in one transaction; NotFound when no live cell was
// there.
func (s *Store) DeleteLatch(ctx context.Context, k dcsync.Key) error {
	const op = "sqlite.DeleteLatch"
	if err := driver.CheckLatch(k, 0); err != nil {
		return err
	}
	return s.write(ctx, op, func(tx *sql.Tx) error {
		where := `client = ? AND name = ?`
		args := []any{k.Client, k.Name}
		if k.Level == dcsync.DC {
			where += ` AND farm = ?`
			args = append(args, k.Farm)
		}
		var live int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM dcsync_latch_cells WHERE `+where+` AND expires_ms > ?`,
			append(append([]any{}, args...), s.now().UnixMilli())...).Scan(&live); err != nil {
			return err
		}
		if live == 0 {
			return driver.Errorf(dcsync.NotFound, op, "latch %s does not exist", k)
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM dcsync_latch_cells WHERE `+where, args...)
		return err
	})
}
