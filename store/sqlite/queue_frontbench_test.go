package sqlite_test

import (
	"context"
	"database/sql"
	"github.com/dcsync/dcsync/driver"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/internal/queuebench"
	"github.com/dcsync/dcsync/store/sqlite"
)

// BenchmarkQueueFrontEnd runs the queue's front-end suite (package queue's Enqueue,
// Consumer.Receive and Ack) on one SQLite file, every Open a new store handle on it,
// next to the raw floor on the same file: INSERTs of the same rows in one IMMEDIATE
// transaction per batch into a WITHOUT ROWID table like the queue's, and SELECTs of a
// key range.
//
//	go test -run '^$' -bench QueueFrontEnd -benchtime 20x -count 3 ./store/sqlite/
func BenchmarkQueueFrontEnd(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "q.db")
	queuebench.Run(b, queuebench.Config{
		Open: func(b *testing.B) driver.Store {
			s, err := sqlite.Open(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
		Raw: newSQLiteRaw(b, path),
	})
}

// sqliteRaw is the raw floor: writer w's rows are partition w of raw_entries (q = 1).
type sqliteRaw struct {
	w, r *sql.DB // one writer connection (as the store's writer semaphore); 8 readers
	mu   sync.Mutex
	seqs map[int]int64 // rows written per writer
	pos  map[int]int64 // next row read per reader
}

func newSQLiteRaw(b *testing.B, path string) *sqliteRaw {
	r := rawDB(b, path)
	r.SetMaxOpenConns(8) // as the store's pool
	return &sqliteRaw{w: rawDB(b, path), r: r, seqs: map[int]int64{}, pos: map[int]int64{}}
}

func (x *sqliteRaw) Write(ctx context.Context, w int, payloads [][]byte) error {
	x.mu.Lock()
	seq := x.seqs[w]
	x.seqs[w] += int64(len(payloads))
	x.mu.Unlock()
	tx, err := x.w.BeginTx(ctx, nil) // IMMEDIATE (rawDB's _txlock)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, `INSERT INTO raw_entries (q, p, seq, key, id, payload, at_ms, aborted) VALUES (1, ?, ?, '', '', ?, ?, 0)`)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now().UnixMilli()
	for i, p := range payloads {
		if _, err := st.ExecContext(ctx, w, seq+int64(i), p, now); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Commit writes reader r's offset in one IMMEDIATE transaction on the writer
// connection, as the store's offset commit is one transaction.
func (x *sqliteRaw) Commit(ctx context.Context, r int, next int64) error {
	_, err := x.w.ExecContext(ctx, `INSERT OR REPLACE INTO raw_offsets (r, next) VALUES (?, ?)`, r, next)
	return err
}

// Read selects n rows of reader r's partition by key range, from where its last read
// ended, wrapping to the start.
func (x *sqliteRaw) Read(ctx context.Context, r, n int) (int, error) {
	x.mu.Lock()
	total := x.seqs[r]
	from := x.pos[r]
	if from+int64(n) > total {
		from = 0
	}
	x.pos[r] = from + int64(n)
	x.mu.Unlock()
	rows, err := x.r.QueryContext(ctx, `SELECT seq, key, id, payload, at_ms, aborted FROM raw_entries
		WHERE q = 1 AND p = ? AND seq >= ? AND seq < ? ORDER BY seq`, r, from, from+int64(n))
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var seq, at int64
		var key, id string
		var payload []byte
		var aborted bool
		if err := rows.Scan(&seq, &key, &id, &payload, &at, &aborted); err != nil {
			return got, err
		}
		got++
	}
	return got, rows.Err()
}
