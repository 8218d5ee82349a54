package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync/queue"
)

func receiveAll(t *testing.T, ctx context.Context, c *queue.Consumer, n int, ack bool) []*queue.Message {
	t.Helper()
	var out []*queue.Message
	for len(out) < n {
		msgs, err := c.Receive(ctx, n-len(out))
		if err != nil {
			t.Fatalf("after %d of %d: %v", len(out), n, err)
		}
		if ack {
			if err := c.Ack(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, msgs...)
	}
	return out
}

// Entries go once every group acked them, not before: the floor follows the slowest
// group.
func TestTrimFollowsTheSlowestGroup(t *testing.T) {
	s, q := newQueue(t, 1, []string{"fast", "slow"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		if _, err := q.Enqueue(ctx, queue.Event{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	fast, _ := q.Consumer(ctx, "fast")
	defer fast.Close(context.Background())
	slow, _ := q.Consumer(ctx, "slow")
	defer slow.Close(context.Background())
	receiveAll(t, ctx, fast, 10, true)
	receiveAll(t, ctx, slow, 4, true)
	floor := func(want uint64) {
		t.Helper()
		for {
			b, err := s.QueueBounds(ctx, "q", []int{0})
			if err != nil {
				t.Fatal(err)
			}
			if b[0].Floor == want {
				return
			}
			if b[0].Floor > want || ctx.Err() != nil {
				t.Fatalf("floor %d, want %d", b[0].Floor, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	floor(4)
	// The trims run at most once a second per partition.
	time.Sleep(1100 * time.Millisecond)
	receiveAll(t, ctx, slow, 6, true)
	floor(10)
}

// With a retention, acked events stay and a Seek replays them.
func TestRetentionKeepsEventsForReplay(t *testing.T) {
	s, q := newQueue(t, 1, []string{"g"}, queue.WithRetention(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		q.Enqueue(ctx, queue.Event{Payload: []byte(fmt.Sprint(i))})
	}
	c, _ := q.Consumer(ctx, "g")
	defer c.Close(context.Background())
	receiveAll(t, ctx, c, 5, true)
	time.Sleep(200 * time.Millisecond) // give a (wrong) trim the chance to run
	if b, _ := s.QueueBounds(ctx, "q", []int{0}); b[0].Floor != 0 {
		t.Fatalf("floor %d within the retention", b[0].Floor)
	}
	if err := c.Seek(ctx, 0, 2); err != nil {
		t.Fatal(err)
	}
	again := receiveAll(t, ctx, c, 3, true)
	if string(again[0].Payload) != "2" || string(again[2].Payload) != "4" {
		t.Fatalf("replayed %s..%s", again[0].Payload, again[2].Payload)
	}
}
