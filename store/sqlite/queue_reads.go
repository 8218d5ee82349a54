package sqlite

import (
	"context"
	"database/sql"

	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueBatchReader = (*Store)(nil)

// rowsQuerier is what readPart needs of a transaction: a *sql.Tx, or a txStmts over
// one.
type rowsQuerier interface {
	queryRower
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// QueryContext runs query as tx.QueryContext does, prepared.
func (c *txStmts) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := c.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.tx.QueryContext(ctx, query, args...)
}

// ReadQueues implements driver.QueueBatchReader: every read in one read transaction
// (one snapshot of the file, the queue looked up once, each read's two statements
// prepared once), each with ReadQueue's result. An invalid read, an unknown queue or
// a database error fails the whole batch.
func (s *Store) ReadQueues(ctx context.Context, name string, reads []driver.QueueReadReq) ([]driver.QueueReadResult, error) {
	const op = "sqlite.ReadQueues"
	if err := driver.ValidateQueueReads(name, reads); err != nil {
		return nil, err
	}
	out := make([]driver.QueueReadResult, len(reads))
	if len(reads) == 0 {
		return out, nil
	}
	err := s.read(ctx, op, func(tx *sql.Tx) error {
		clear(out) // a try that failed busy is run again
		m, err := s.queue(ctx, tx, op, name)
		if err != nil {
			return err
		}
		stmts := newTxStmts(tx)
		defer stmts.Close()
		for i, r := range reads {
			if out[i].QueueRead, err = readPart(ctx, stmts, m.id, r.P, r.From, r.Max); err != nil {
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
