package sqlite

import (
	"context"
	"encoding/json"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueLister = (*Store)(nil)

// ListQueues implements driver.QueueLister: every queue's spec, sorted by name, in one
// query (none when the file has no queue tables yet).
func (s *Store) ListQueues(ctx context.Context) ([]driver.QueueSpec, error) {
	const op = "sqlite.ListQueues"
	var out []driver.QueueSpec
	err := s.retry(ctx, op, func() error {
		out = out[:0]
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = 'dcsync_queues'`).Scan(&n); err != nil || n == 0 {
			return err
		}
		rows, err := s.db.QueryContext(ctx, `SELECT name, partitions, groups, dedup_ns, created_ms FROM dcsync_queues ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var spec driver.QueueSpec
			var groups string
			var dedup, created int64
			if err := rows.Scan(&spec.Name, &spec.Partitions, &groups, &dedup, &created); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(groups), &spec.Groups); err != nil {
				return driver.Errorf(dcsync.Internal, op, "%s: queue %q: malformed groups %q: %w", s.path, spec.Name, groups, err)
			}
			spec.Dedup, spec.Created = time.Duration(dedup), time.UnixMilli(created)
			out = append(out, spec)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
