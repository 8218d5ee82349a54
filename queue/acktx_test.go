package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/sqlite"
)

// AckTx commits the application's write and the ack together; when the application's
// part fails, neither is kept: the event is delivered again and no later ack moves
// the offset past it.
func TestAckTxIsAtomicWithTheApplicationsWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE totals (k TEXT PRIMARY KEY, n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	q, err := queue.Create(ctx, s, queue.Spec{Name: "tx", Partitions: 1, Groups: []string{"g"}},
		queue.WithVisibility(time.Hour), queue.WithRetryBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, queue.Event{Payload: []byte("a")}, queue.Event{Payload: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	msgs, err := c.Receive(ctx, 2)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("%v %v", msgs, err)
	}
	add := func(tx *sql.Tx, k string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO totals VALUES (?, 1) ON CONFLICT(k) DO UPDATE SET n = n + 1`, k)
		return err
	}
	boom := errors.New("application failure")
	if err := c.AckTx(ctx, msgs[:1], func(tx *sql.Tx) error {
		if err := add(tx, string(msgs[0].Payload)); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("AckTx: %v, want the application's error", err)
	}
	// b's ack must not carry the offset past the rolled-back a.
	if err := c.AckTx(ctx, msgs[1:], func(tx *sql.Tx) error { return add(tx, "b") }); err != nil {
		t.Fatal(err)
	}
	if lag, _ := q.Lag(ctx, "g"); lag[0].Next != 0 {
		t.Fatalf("offset %d after a's rollback, want 0", lag[0].Next)
	}
	// a is still in flight (the rolled-back ack left it so): the application gives up.
	if err := c.Nack(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	again, err := c.Receive(ctx, 2)
	if err != nil || len(again) != 1 || string(again[0].Payload) != "a" || again[0].Attempt != 2 {
		t.Fatalf("redelivery: %+v %v", again, err)
	}
	if err := c.AckTx(ctx, again, func(tx *sql.Tx) error { return add(tx, "a") }); err != nil {
		t.Fatal(err)
	}
	if lag, _ := q.Lag(ctx, "g"); lag[0].Next != 2 {
		t.Fatalf("offset %d, want 2", lag[0].Next)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT SUM(n) FROM totals`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("totals %d (%v), want 2: each event applied once", n, err)
	}
}
