package sqlite

import (
	"context"
	"database/sql"
)

// txQuerier is what the single lock operations' bodies (acquireTx, releaseTx) need of
// a transaction: a *sql.Tx, or a txStmts over one.
type txQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// txStmts runs a transaction's queries through statements prepared once per query
// text, for the batched calls (AcquireLocks, ReleaseLocks, ClaimQueuePartitions),
// which run the same few statements once per request: parsing their text every time
// took a quarter of the process's CPU in the queue's scale benchmark (P = 4,096,
// C = 64), and a batch of 4,096 acquires about four times as long as with prepared
// statements. A query that cannot be prepared runs unprepared, which reports the
// error.
type txStmts struct {
	tx *sql.Tx
	m  map[string]*sql.Stmt
}

func newTxStmts(tx *sql.Tx) *txStmts { return &txStmts{tx: tx, m: map[string]*sql.Stmt{}} }

func (c *txStmts) stmt(ctx context.Context, query string) *sql.Stmt {
	if st, ok := c.m[query]; ok {
		return st
	}
	st, err := c.tx.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	c.m[query] = st
	return st
}

// QueryRowContext runs query as tx.QueryRowContext does, prepared.
func (c *txStmts) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := c.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.tx.QueryRowContext(ctx, query, args...)
}

// ExecContext runs query as tx.ExecContext does, prepared.
func (c *txStmts) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := c.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return c.tx.ExecContext(ctx, query, args...)
}

// Close closes the prepared statements (before the transaction ends).
func (c *txStmts) Close() {
	for _, st := range c.m {
		st.Close()
	}
	clear(c.m)
}
