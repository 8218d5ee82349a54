package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/sqlite"
)

// txFixture is a store with queue "q" (group "g", partition 0 claimed by token 2) and
// an application table app(k, v) in the same file.
func txFixture(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "q.db"))
	createQueue(t, s, "q", 1, "g")
	appendQ(t, s, "q", driver.QueueEvent{Payload: []byte("e0")}, driver.QueueEvent{Payload: []byte("e1")})
	if _, err := s.ClaimQueuePartition(ctx, "q", "g", 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE app (k TEXT PRIMARY KEY, v TEXT)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

func appRows(t *testing.T, s *sqlite.Store) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM app`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func offset0(t *testing.T, s *sqlite.Store) driver.QueueOffset {
	t.Helper()
	offs, err := s.ReadQueueOffsets(context.Background(), "q", "g", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	return offs[0]
}

var _ driver.QueueTxCommitter = (*sqlite.Store)(nil)

// An application write and an ack in one transaction commit together (WriteTx) and
// roll back together.
func TestQueueCommitTx(t *testing.T) {
	ctx := context.Background()
	s := txFixture(t)
	errApp := errors.New("the application changed its mind")
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO app VALUES ('e0', 'done')`); err != nil {
			return err
		}
		if err := s.CommitQueueOffsetTx(ctx, tx, "q", "g", 0, driver.QueueOffset{Token: 2, Next: 1, Held: true, Version: 1}); err != nil {
			return err
		}
		return errApp
	})
	if !errors.Is(err, errApp) {
		t.Fatalf("WriteTx: %v, want the application's error", err)
	}
	if n, off := appRows(t, s), offset0(t, s); n != 0 || off.Next != 0 {
		t.Fatalf("after a rollback: %d app rows, offset %+v", n, off)
	}
	err = s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO app VALUES ('e0', 'done')`); err != nil {
			return err
		}
		return s.CommitQueueOffsetTx(ctx, tx, "q", "g", 0, driver.QueueOffset{Token: 2, Next: 1, Held: true, Version: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, off := appRows(t, s), offset0(t, s); n != 1 || off != (driver.QueueOffset{Token: 2, Next: 1, Held: true, Version: 1}) {
		t.Fatalf("after a commit: %d app rows, offset %+v", n, off)
	}
}

// The same through DB().BeginTx (an IMMEDIATE transaction: the handle's _txlock).
func TestQueueCommitTxBeginTx(t *testing.T) {
	ctx := context.Background()
	s := txFixture(t)
	for _, commit := range []bool{false, true} {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The transaction holds the write lock from its start: another connection
		// cannot begin writing.
		other, err := sql.Open("sqlite", "file:"+s.Path()+"?_pragma=busy_timeout(0)")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(`BEGIN IMMEDIATE`); err == nil {
			t.Fatal("another connection took the write lock during an open DB().BeginTx transaction")
		}
		other.Close()
		if _, err := tx.ExecContext(ctx, `INSERT INTO app VALUES ('e1', 'x')`); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitQueueOffsetTx(ctx, tx, "q", "g", 0, driver.QueueOffset{Token: 2, Next: 2, Held: true, Version: 2}); err != nil {
			t.Fatal(err)
		}
		if !commit {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if n, off := appRows(t, s), offset0(t, s); n != 0 || off.Next != 0 {
				t.Fatalf("after a rollback: %d app rows, offset %+v", n, off)
			}
			continue
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n, off := appRows(t, s), offset0(t, s); n != 1 || off.Next != 2 {
			t.Fatalf("after a commit: %d app rows, offset %+v", n, off)
		}
	}
}

// A stale owner's ack fails inside the transaction with LockLost, writing nothing, so
// the application rolls its own writes back.
func TestQueueCommitTxStaleToken(t *testing.T) {
	ctx := context.Background()
	s := txFixture(t)
	if _, err := s.ClaimQueuePartition(ctx, "q", "g", 0, 3); err != nil { // a new owner
		t.Fatal(err)
	}
	var inTx error
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO app VALUES ('e0', 'zombie')`); err != nil {
			return err
		}
		inTx = s.CommitQueueOffsetTx(ctx, tx, "q", "g", 0, driver.QueueOffset{Token: 2, Next: 1, Held: true, Version: 1})
		return inTx
	})
	if !errors.Is(inTx, dcsync.ErrLockLost) || !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("stale ack: %v (WriteTx: %v), want LockLost", inTx, err)
	}
	if n, off := appRows(t, s), offset0(t, s); n != 0 || off != (driver.QueueOffset{Token: 3}) {
		t.Fatalf("after a stale ack: %d app rows, offset %+v", n, off)
	}
}

// A transaction of another file is refused before any write.
func TestQueueCommitTxOtherFile(t *testing.T) {
	ctx := context.Background()
	s := txFixture(t)
	other := open(t, filepath.Join(t.TempDir(), "other.db"))
	createQueue(t, other, "q", 1, "g")
	if _, err := other.ClaimQueuePartition(ctx, "q", "g", 0, 2); err != nil {
		t.Fatal(err)
	}
	err := other.WriteTx(ctx, func(tx *sql.Tx) error {
		return s.CommitQueueOffsetTx(ctx, tx, "q", "g", 0, driver.QueueOffset{Token: 2, Next: 1, Version: 1})
	})
	if !errors.Is(err, dcsync.ErrInvalidArgument) {
		t.Fatalf("tx of another file: %v, want InvalidArgument", err)
	}
	if off := offset0(t, s); off.Next != 0 {
		t.Fatalf("offset %+v", off)
	}
	// A tx of another handle on the store's own file is fine.
	db, err := sql.Open("sqlite", "file:"+s.Path()+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CommitQueueOffsetTx(ctx, tx, "q", "g", 0, driver.QueueOffset{Token: 2, Next: 1, Held: true, Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if off := offset0(t, s); off.Next != 1 {
		t.Fatalf("offset %+v", off)
	}
}

// WriteTx waits for another connection's write lock (where DB().BeginTx would fail at
// once with SQLITE_BUSY), then commits the application's write and the ack together.
func TestQueueWriteTxWaitsForTheLock(t *testing.T) {
	ctx := context.Background()
	s := txFixture(t)
	db, err := sql.Open("sqlite", "file:"+s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if tx, err := s.DB().BeginTx(ctx, nil); err == nil {
		tx.Rollback()
		t.Fatal("DB().BeginTx began a write transaction while another connection held the lock")
	}
	done := make(chan error, 1)
	go func() {
		done <- s.WriteTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO app VALUES ('e0', 'done')`); err != nil {
				return err
			}
			return s.CommitQueueOffsetTx(ctx, tx, "q", "g", 0, driver.QueueOffset{Token: 2, Next: 1, Held: true, Version: 1})
		})
	}()
	if _, err := conn.ExecContext(ctx, "INSERT INTO app VALUES ('other', 'first')"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WriteTx: %v", err)
	}
	if n, off := appRows(t, s), offset0(t, s); n != 2 || off.Next != 1 {
		t.Fatalf("%d app rows, offset %+v", n, off)
	}
}
