package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/sqlite"
)

// queueRows counts the rows of queue id in each queue table, and the rows of any
// queue table whose id no queue has (left by a delete).
func queueRows(t *testing.T, s *sqlite.Store, id int64) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, tb := range []string{"dcsync_queue_entries", "dcsync_queue_heads", "dcsync_queue_offsets", "dcsync_queue_dedup"} {
		var k, orphans int
		if err := s.DB().QueryRow(`SELECT COUNT(*) FROM `+tb+` WHERE q = ?`, id).Scan(&k); err != nil {
			t.Fatal(err)
		}
		if err := s.DB().QueryRow(`SELECT COUNT(*) FROM ` + tb + ` WHERE q NOT IN (SELECT id FROM dcsync_queues)`).Scan(&orphans); err != nil {
			t.Fatal(err)
		}
		n[tb], n[tb+" (no queue)"] = k, orphans
	}
	var k int
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM dcsync_queues WHERE id = ?`, id).Scan(&k); err != nil {
		t.Fatal(err)
	}
	n["dcsync_queues"] = k
	return n
}

// TestDeleteQueueLeavesNoRow counts the file's rows of a queue holding every kind of
// record before and after DeleteQueue.
func TestDeleteQueueLeavesNoRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	drivertest.PopulateQueue(t, ctx, s, "q")
	drivertest.PopulateQueue(t, ctx, s, "other")
	var id, otherID int64
	if err := s.DB().QueryRow(`SELECT id FROM dcsync_queues WHERE name = 'q'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().QueryRow(`SELECT id FROM dcsync_queues WHERE name = 'other'`).Scan(&otherID); err != nil {
		t.Fatal(err)
	}
	before, other := queueRows(t, s, id), queueRows(t, s, otherID)
	for k, v := range before {
		if v == 0 && k[len(k)-1] != ')' {
			t.Fatalf("PopulateQueue wrote no row of %s: %v", k, before)
		}
	}
	if err := s.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	for k, v := range queueRows(t, s, id) {
		if v != 0 {
			t.Fatalf("%d rows of %s left after DeleteQueue (before: %v)", v, k, before)
		}
	}
	for k, v := range queueRows(t, s, otherID) {
		if v != other[k] {
			t.Fatalf("another queue's rows of %s changed: %d, want %d", k, v, other[k])
		}
	}
}

// TestDeletedQueueIDNotReusedThroughACache: a store that used a queue before another
// store on the file deleted it gets NotFound on the name, and never writes the rows of
// the queue that got the deleted queue's id (SQLite gives the highest id again).
func TestDeletedQueueIDNotReusedThroughACache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "q.db")
	a, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	spec := driver.QueueSpec{Name: "old", Partitions: 1, Groups: []string{"g"}}
	if err := a.CreateQueue(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AppendQueue(ctx, "old", []driver.QueueEvent{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteQueue(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	spec.Name = "new"
	if err := a.CreateQueue(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var oldID, newID int64 = 1, 0
	if err := a.DB().QueryRow(`SELECT id FROM dcsync_queues WHERE name = 'new'`).Scan(&newID); err != nil {
		t.Fatal(err)
	}
	if newID != oldID {
		t.Logf("the new queue got id %d, not the deleted queue's %d", newID, oldID)
	}
	_, err = b.AppendQueue(ctx, "old", []driver.QueueEvent{{Payload: []byte("late")}})
	if dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("append to the deleted queue through a store that cached it: %v, want NotFound", err)
	}
	if _, err := b.QueueBounds(ctx, "old", []int{0}); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("bounds of the deleted queue through a store that cached it: %v, want NotFound", err)
	}
	bs, err := a.QueueBounds(ctx, "new", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if bs[0].Head != 0 {
		t.Fatalf("the new queue holds %d events it was never given", bs[0].Head)
	}
}
