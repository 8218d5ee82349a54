package queue_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/queuebench"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/sqlite"
)

// On SQLite an Ack of messages of several partitions writes their offset records in
// one transaction (one WriteTx, no CommitQueueOffset); a record refused there (its
// partition claimed by a later owner) changes nothing of it and does not stop the
// others: their acks are recorded, and the Ack reports LockLost for the refused one
// only.
func TestAckOfSeveralPartitionsIsOneTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	counts := queuebench.NewCounts()
	s := queuebench.Count(raw, counts)
	const parts = 3
	q, err := queue.Create(ctx, s, queue.Spec{Name: "b", Partitions: parts, Groups: []string{"g"}},
		queue.WithLease(testLease), queue.WithPollInterval(20*time.Millisecond), queue.WithVisibility(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Two events in each partition.
	n := map[int]int{}
	var evs []queue.Event
	for k := 0; len(evs) < 2*parts; k++ {
		key := string(rune('a' + k))
		if p := queue.Partition(key, parts); n[p] < 2 {
			n[p]++
			evs = append(evs, queue.Event{Key: key, Payload: []byte(key)})
		}
	}
	if _, err := q.Enqueue(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	msgs := receiveAll(t, ctx, c, 2*parts, false)

	// The first events of every partition, acked together: one transaction.
	var first, second []*queue.Message
	for _, m := range msgs {
		if m.Seq == 0 {
			first = append(first, m)
		} else {
			second = append(second, m)
		}
	}
	before := counts.Snapshot()
	if err := c.Ack(ctx, first...); err != nil {
		t.Fatal(err)
	}
	d := counts.Snapshot().Sub(before)
	if d["WriteTx"] != 1 || d["WriteTx.commits"] != parts || d["CommitQueueOffset"] != 0 {
		t.Fatalf("an ack of %d partitions made %v, want one WriteTx of %d commits", parts, d, parts)
	}

	// A later owner claims partition lost; the others' acks still land.
	lost := second[0].Partition
	if _, err := raw.ClaimQueuePartition(ctx, "b", "g", lost, second[0].Token+1000); err != nil {
		t.Fatal(err)
	}
	err = c.Ack(ctx, second...)
	if !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Ack with partition %d claimed by another: %v, want LockLost", lost, err)
	}
	lag, err := q.Lag(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	for p := 0; p < parts; p++ {
		want := uint64(2)
		if p == lost {
			want = 1 // the claim kept the stored offset; the refused write changed nothing
		}
		if lag[p].Next != want {
			t.Fatalf("partition %d: offset %d, want %d (lag %+v)", p, lag[p].Next, want, lag)
		}
	}
}
