package sqlite

import (
	"context"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.Baseliner = (*Store)(nil)

// Baseline returns raw statements on the store's own tables, each one autocommitted
// statement as a plain SQL client would send it: the lock floor inserts a row of
// dcsync_locks if absent and deletes it, the counter is a row of dcsync_latch_cells
// (client prefix, name "baseline"), updated in place. Close deletes both rows.
func (s *Store) Baseline(ctx context.Context, prefix string) (driver.Baseline, error) {
	const op = "sqlite.Baseline"
	if err := driver.ValidateID("baseline prefix", prefix); err != nil {
		return nil, err
	}
	if s.readOnly {
		return nil, driver.Errorf(dcsync.NotImplemented, op, "%s is opened read-only: a baseline writes", s.path)
	}
	b := &sqlBaseline{s: s, client: "dcsync-bench:" + prefix}
	// The counter ends in a day, as a latch would; Close removes it before then.
	if _, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO dcsync_latch_cells (client, name, farm, count, expires_ms) VALUES (?, 'baseline', 'bench', 0, ?)`,
		b.client, s.now().UnixMilli()+86_400_000); err != nil {
		return nil, driver.Wrap(err, dcsync.Connection, op)
	}
	return b, nil
}

type sqlBaseline struct {
	s      *Store
	client string
}

func (b *sqlBaseline) Describe() map[string]string {
	return map[string]string{
		"lock": "INSERT OR IGNORE + DELETE (autocommit)",
		"add":  "UPDATE count = count + ? (autocommit)",
		"get":  "SELECT count",
	}
}

func (b *sqlBaseline) LockPair(ctx context.Context) error {
	const op = "sqlite.Baseline"
	res, err := b.s.db.ExecContext(ctx, `INSERT OR IGNORE INTO dcsync_locks (level, farm, client, name, owner, token, expires_ms) VALUES (0, 'bench', ?, 'baseline', 'bench', 0, 0)`, b.client)
	if err != nil {
		return driver.Wrap(err, dcsync.Connection, op)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return driver.Errorf(dcsync.Internal, op, "baseline lock row exists")
	}
	if _, err := b.s.db.ExecContext(ctx, `DELETE FROM dcsync_locks WHERE level = 0 AND farm = 'bench' AND client = ? AND name = 'baseline'`, b.client); err != nil {
		return driver.Wrap(err, dcsync.Connection, op)
	}
	return nil
}

func (b *sqlBaseline) Add(ctx context.Context, delta int64) error {
	_, err := b.s.db.ExecContext(ctx, `UPDATE dcsync_latch_cells SET count = count + ? WHERE client = ? AND name = 'baseline' AND farm = 'bench'`, delta, b.client)
	return driver.Wrap(err, dcsync.Connection, "sqlite.Baseline")
}

func (b *sqlBaseline) Get(ctx context.Context) error {
	var n int64
	err := b.s.db.QueryRowContext(ctx, `SELECT count FROM dcsync_latch_cells WHERE client = ? AND name = 'baseline' AND farm = 'bench'`, b.client).Scan(&n)
	return driver.Wrap(err, dcsync.Connection, "sqlite.Baseline")
}

func (b *sqlBaseline) Close(ctx context.Context) error {
	if _, err := b.s.db.ExecContext(ctx, `DELETE FROM dcsync_latch_cells WHERE client = ?`, b.client); err != nil {
		return driver.Wrap(err, dcsync.Connection, "sqlite.Baseline")
	}
	_, err := b.s.db.ExecContext(ctx, `DELETE FROM dcsync_locks WHERE client = ?`, b.client)
	return driver.Wrap(err, dcsync.Connection, "sqlite.Baseline")
}
