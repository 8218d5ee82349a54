package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueDeleter = (*Store)(nil)

// queueTables are the tables that hold a queue's records by its id (column q), each
// emptied of the queue's rows by DeleteQueue.
var queueTables = []string{"dcsync_queue_entries", "dcsync_queue_heads", "dcsync_queue_offsets", "dcsync_queue_dedup"}

// DeleteQueue implements driver.QueueDeleter: one IMMEDIATE transaction deletes the
// queue's rows of every queue table (entries and tombstones, heads and floors,
// offsets, remembered ids: one indexed range delete each, on the tables' primary keys
// that start with the queue's id) and then its row of dcsync_queues, so the queue goes
// at once, or not at all. It reads the queue's id from the file, not from the store's
// cache, and forgets the cached id: an id may be given to a queue created later.
//
// Another Store on the same file (another process) that used the queue keeps its
// cached id: its later calls on the name write rows under the old id (which no queue
// reads, and which a DeleteQueue of the name does not find) or, when a new queue of
// the name got the same id, act on the new queue. Close such stores (or stop their
// producers and consumers) before deleting.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	const op = "sqlite.DeleteQueue"
	if err := driver.ValidateID("queue", name); err != nil {
		return err
	}
	var id int64
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = 'dcsync_queues'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return driver.Errorf(dcsync.NotFound, op, "queue %q does not exist in %s", name, s.path)
		}
		err := tx.QueryRowContext(ctx, `SELECT id FROM dcsync_queues WHERE name = ?`, name).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return driver.Errorf(dcsync.NotFound, op, "queue %q does not exist in %s", name, s.path)
		}
		if err != nil {
			return err
		}
		for _, t := range queueTables {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+t+` WHERE q = ?`, id); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM dcsync_queues WHERE id = ?`, id)
		return err
	})
	if err != nil && !errors.Is(err, dcsync.ErrNotFound) {
		return err
	}
	st := &s.queues
	st.mu.Lock()
	delete(st.meta, name)
	if err == nil {
		delete(st.swept, id)
	}
	st.mu.Unlock()
	return err
}
