package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/sqlite"
)

// Queue benchmarks: the store's operation next to the raw SQLite work it cannot do
// without, on the same file with the same settings (WAL, synchronous FULL). One
// iteration is one batch of benchBatch events of benchPayload bytes; every benchmark
// reports events/s.
//
//	go test -run '^$' -bench BenchmarkQueue -benchtime 200x -count 5 ./store/sqlite/
const (
	benchBatch      = 500
	benchPayload    = 1 << 10
	benchPartitions = 8
)

const rawSchema = `CREATE TABLE IF NOT EXISTS raw_entries (
	q INTEGER NOT NULL, p INTEGER NOT NULL, seq INTEGER NOT NULL,
	key TEXT NOT NULL, id TEXT NOT NULL, payload BLOB, at_ms INTEGER NOT NULL, aborted INTEGER NOT NULL,
	PRIMARY KEY (q, p, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS raw_offsets (r INTEGER PRIMARY KEY, next INTEGER NOT NULL) WITHOUT ROWID`

// rawDB opens the file as a plain handle: IMMEDIATE transactions, SQLite's busy
// handler, one connection (database/sql serialises the writers, as the store's
// semaphore does).
func rawDB(b *testing.B, path string) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { db.Close() })
	if _, err := db.Exec(rawSchema); err != nil {
		b.Fatal(err)
	}
	return db
}

func benchEvents(g, batch int, withIDs bool) []driver.QueueEvent {
	payload := make([]byte, benchPayload)
	for i := range payload {
		payload[i] = byte(i)
	}
	evs := make([]driver.QueueEvent, benchBatch)
	for i := range evs {
		evs[i] = driver.QueueEvent{Partition: i % benchPartitions, Key: fmt.Sprintf("key-%d", i), Payload: payload}
		if withIDs {
			evs[i].ID = fmt.Sprintf("id-%d-%d-%d", g, batch, i)
		}
	}
	return evs
}

// parallel runs b.N iterations split among goroutines, fn(g, i) being iteration i of
// goroutine g, and reports events/s.
func parallel(b *testing.B, goroutines int, fn func(g, i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	b.ResetTimer()
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if next.Add(1) > int64(b.N) || failed.Load() != nil {
					return
				}
				if err := fn(g, i); err != nil {
					failed.Store(&err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "events/s")
}

func BenchmarkQueueEnqueue(b *testing.B) {
	ctx := context.Background()
	for _, goroutines := range []int{1, 4} {
		for _, ids := range []bool{false, true} {
			suffix := fmt.Sprintf("g=%d", goroutines)
			if ids {
				suffix += "/ids"
			}
			b.Run("Store/"+suffix, func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "q.db")
				s, err := sqlite.Open(ctx, path)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if err := s.CreateQueue(ctx, driver.QueueSpec{Name: "bench", Partitions: benchPartitions, Groups: []string{"g"}}); err != nil {
					b.Fatal(err)
				}
				parallel(b, goroutines, func(g, i int) error {
					_, err := s.AppendQueue(ctx, "bench", benchEvents(g, i, ids))
					return err
				})
			})
			// The same rows inserted in one IMMEDIATE transaction per batch; each
			// goroutine writes its own partitions, so no head is read or kept.
			b.Run("Raw/"+suffix, func(b *testing.B) {
				db := rawDB(b, filepath.Join(b.TempDir(), "raw.db"))
				seqs := make([]int64, goroutines)
				parallel(b, goroutines, func(g, i int) error {
					evs := benchEvents(g, i, ids)
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					st, err := tx.PrepareContext(ctx, `INSERT INTO raw_entries (q, p, seq, key, id, payload, at_ms, aborted) VALUES (?, ?, ?, ?, ?, ?, ?, 0)`)
					if err != nil {
						return err
					}
					defer st.Close()
					now := time.Now().UnixMilli()
					for _, e := range evs {
						if _, err := st.ExecContext(ctx, 1, g*benchPartitions+e.Partition, seqs[g], e.Key, e.ID, e.Payload, now); err != nil {
							return err
						}
						seqs[g]++
					}
					return tx.Commit()
				})
			})
		}
	}
}

// BenchmarkQueueReceive: ReadQueue of a batch plus CommitQueueOffset of its end, from
// one partition, against a raw SELECT of the same rows. The partition is filled before
// the timer starts.
func BenchmarkQueueReceive(b *testing.B) {
	ctx := context.Background()
	fill := func(b *testing.B, add func(evs []driver.QueueEvent) error) {
		for i := 0; i < b.N; i++ {
			evs := benchEvents(0, i, false)
			for j := range evs {
				evs[j].Partition = 0
			}
			if err := add(evs); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("Store/read+ack", func(b *testing.B) {
		s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "q.db"))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if err := s.CreateQueue(ctx, driver.QueueSpec{Name: "bench", Partitions: 1, Groups: []string{"g"}}); err != nil {
			b.Fatal(err)
		}
		fill(b, func(evs []driver.QueueEvent) error { _, err := s.AppendQueue(ctx, "bench", evs); return err })
		off, err := s.ClaimQueuePartition(ctx, "bench", "g", 0, 1)
		if err != nil {
			b.Fatal(err)
		}
		parallel(b, 1, func(_, _ int) error {
			r, err := s.ReadQueue(ctx, "bench", 0, off.Next, benchBatch)
			if err != nil {
				return err
			}
			if len(r.Entries) != benchBatch {
				return fmt.Errorf("read %d entries at %d", len(r.Entries), off.Next)
			}
			off.Next += uint64(len(r.Entries))
			off.Version++
			return s.CommitQueueOffset(ctx, "bench", "g", 0, off)
		})
	})
	b.Run("Raw/select", func(b *testing.B) {
		db := rawDB(b, filepath.Join(b.TempDir(), "raw.db"))
		var seq int64
		fill(b, func(evs []driver.QueueEvent) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			for _, e := range evs {
				if _, err := tx.ExecContext(ctx, `INSERT INTO raw_entries VALUES (1, 0, ?, ?, ?, ?, ?, 0)`, seq, e.Key, e.ID, e.Payload, time.Now().UnixMilli()); err != nil {
					return err
				}
				seq++
			}
			return tx.Commit()
		})
		var next int64
		parallel(b, 1, func(_, _ int) error {
			rows, err := db.QueryContext(ctx, `SELECT seq, key, id, payload, at_ms, aborted FROM raw_entries
				WHERE q = 1 AND p = 0 AND seq >= ? ORDER BY seq LIMIT ?`, next, benchBatch)
			if err != nil {
				return err
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				var e driver.QueueEntry
				var s, at int64
				if err := rows.Scan(&s, &e.Key, &e.ID, &e.Payload, &at, &e.Aborted); err != nil {
					return err
				}
				n++
			}
			if n != benchBatch {
				return fmt.Errorf("read %d rows at %d", n, next)
			}
			next += int64(n)
			return rows.Err()
		})
	})
}
