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
	s, q := newQueue(t, 1, []string{"fast", "slow"}, queue.WithTrimPeriod(time.Second))
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
	// The trims run at most once a second per consumer (WithTrimPeriod).
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

// Trimming covers every partition a consumer owns, in passes at most one trim period
// apart, and never deletes an event some group has not acked: with two groups over four
// partitions, each partition's floor reaches the slower group's offset (trimming did
// not stop), and never goes above it (no unacked row deleted); the slower group then
// receives every event it had not acked.
func TestTrimPassCoversEveryPartition(t *testing.T) {
	const parts, per = 4, 12
	s, q := newQueue(t, parts, []string{"all", "some"}, queue.WithTrimPeriod(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// per events in each partition, by key.
	n := map[int]int{}
	var evs []queue.Event
	for k := 0; len(evs) < parts*per; k++ {
		key := fmt.Sprint("k", k)
		if p := queue.Partition(key, parts); n[p] < per {
			n[p]++
			evs = append(evs, queue.Event{Key: key, Payload: []byte(key)})
		}
	}
	if _, err := q.Enqueue(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	all, _ := q.Consumer(ctx, "all")
	defer all.Close(context.Background())
	receiveAll(t, ctx, all, parts*per, true)
	some, _ := q.Consumer(ctx, "some")
	defer some.Close(context.Background())
	// "some" acks a different count in each partition: the first p+1 events of
	// partition p (each partition's events are delivered in seq order).
	acked := map[int]int{}
	var kept []*queue.Message
	for got := 0; got < parts*per; {
		msgs, err := some.Receive(ctx, parts*per-got)
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
		for _, m := range msgs {
			if m.Seq < uint64(m.Partition+1) && acked[m.Partition] == int(m.Seq) {
				if err := some.Ack(ctx, m); err != nil {
					t.Fatal(err)
				}
				acked[m.Partition]++
				continue
			}
			kept = append(kept, m)
		}
	}
	want := func(p int) uint64 { return uint64(acked[p]) }
	for deadline := time.Now().Add(30 * time.Second); ; {
		b, err := s.QueueBounds(ctx, "q", []int{0, 1, 2, 3})
		if err != nil {
			t.Fatal(err)
		}
		done := true
		for p := range parts {
			if b[p].Floor > want(p) {
				t.Fatalf("partition %d: floor %d above the slower group's offset %d: unacked events deleted", p, b[p].Floor, want(p))
			}
			done = done && b[p].Floor == want(p)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("floors %+v, want %v: trimming stopped", b, acked)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What "some" did not ack is still there: nacked, it comes back.
	for _, m := range kept {
		if err := some.Nack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	again := receiveAll(t, ctx, some, len(kept), true)
	if len(again) != len(kept) {
		t.Fatalf("received %d again, want %d", len(again), len(kept))
	}
}
