package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/sqlite"
)

func BenchmarkSQLite(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	drivertest.Bench(b, s)

	// The floor: one IMMEDIATE transaction updating one row, and one point read, on
	// the same file with the same settings.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS raw (k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID; INSERT OR REPLACE INTO raw VALUES ('k', 0)`); err != nil {
		b.Fatal(err)
	}
	b.Run("Raw/write-tx", func(b *testing.B) {
		drivertest.Timed(b, func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE raw SET v = v - 1 WHERE k = 'k'`); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		})
	})
	b.Run("Raw/read", func(b *testing.B) {
		drivertest.Timed(b, func() error {
			var v int64
			return db.QueryRowContext(ctx, `SELECT v FROM raw WHERE k = 'k'`).Scan(&v)
		})
	})
}
