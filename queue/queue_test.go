package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// testLease is the lease of consumers whose renewals must succeed while a test runs:
// long enough for a loaded 2-core machine. zombieLease is the lease of consumers a test
// lets lapse on purpose: they only need it to last from their claim to their first
// delivery, and the test waits it out.
const (
	testLease   = 10 * time.Second
	zombieLease = 5 * time.Second
)

func newQueue(t *testing.T, parts int, groups []string, opts ...queue.Option) (*memory.Store, *queue.Queue) {
	t.Helper()
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	// A lease a loaded machine keeps: no test here lets a lease run out, and a lapsed
	// one would fail an Ack.
	opts = append([]queue.Option{queue.WithLease(testLease), queue.WithPollInterval(20 * time.Millisecond)}, opts...)
	q, err := queue.Create(context.Background(), s, queue.Spec{Name: "q", Partitions: parts, Groups: groups}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, q
}

// Two consumers of one group and one of another receive every event: exactly once per
// group, in key order.
func TestExactlyOncePerGroupInKeyOrder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	_, q := newQueue(t, 8, []string{"a", "b"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const keys, per = 10, 50
	var mu sync.Mutex
	got := map[string]map[string]int{"a": {}, "b": {}}
	last := map[string]map[string]int{"a": {}, "b": {}}
	var orderErr error
	total := keys * per
	var wg sync.WaitGroup
	consume := func(group string) {
		defer wg.Done()
		c, err := q.Consumer(ctx, group)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		for {
			mu.Lock()
			done := len(got[group]) == total
			mu.Unlock()
			if done {
				return
			}
			rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			msgs, err := c.Receive(rctx, 16)
			rcancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, m := range msgs {
				var k, i int
				fmt.Sscanf(string(m.Payload), "%d/%d", &k, &i)
				if prev, ok := last[group][m.Key]; ok && i <= prev && orderErr == nil {
					orderErr = fmt.Errorf("group %s key %s: %d after %d", group, m.Key, i, prev)
				}
				last[group][m.Key] = i
				got[group][string(m.Payload)]++
			}
			mu.Unlock()
			if err := c.Ack(ctx, msgs...); err != nil {
				t.Error(err)
			}
		}
	}
	wg.Add(3)
	go consume("a")
	go consume("a")
	go consume("b")
	for i := 0; i < per; i++ {
		var evs []queue.Event
		for k := 0; k < keys; k++ {
			evs = append(evs, queue.Event{Key: fmt.Sprint("k", k), Payload: []byte(fmt.Sprintf("%d/%d", k, i))})
		}
		if _, err := q.Enqueue(ctx, evs...); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if orderErr != nil {
		t.Error(orderErr)
	}
	for g, m := range got {
		for p, n := range m {
			if n != 1 {
				t.Errorf("group %s: %s received %d times", g, p, n)
			}
		}
		if len(m) != total {
			t.Errorf("group %s: %d distinct events, want %d", g, len(m), total)
		}
	}
	lag, err := q.Lag(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lag {
		if l.Lag != 0 {
			t.Errorf("lag %+v", l)
		}
	}
}

func TestNackDeadLetters(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	_, q := newQueue(t, 2, []string{"g"}, queue.WithMaxAttempts(3), queue.WithRetryBackoff(time.Millisecond, 4*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := q.Enqueue(ctx, queue.Event{Key: "x", Payload: []byte("poison")}, queue.Event{Key: "x", Payload: []byte("next")}); err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for attempt := 1; attempt <= 3; attempt++ {
		msgs, err := c.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 || string(msgs[0].Payload) != "poison" || msgs[0].Attempt != attempt {
			t.Fatalf("attempt %d: got %d msgs, first %q attempt %d", attempt, len(msgs), msgs[0].Payload, msgs[0].Attempt)
		}
		if err := c.Nack(ctx, msgs[0]); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := c.Receive(ctx, 10)
	if err != nil || len(msgs) != 1 || string(msgs[0].Payload) != "next" {
		t.Fatalf("after dead-lettering: %v %v", msgs, err)
	}
	if err := c.Ack(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	d, err := q.Consumer(ctx, "g", queue.DeadLetters())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	dm, err := d.Receive(ctx, 10)
	if err != nil || len(dm) != 1 || string(dm[0].Payload) != "poison" || dm[0].DeadFrom == "" {
		t.Fatalf("dead letters: %+v %v", dm, err)
	}
	if err := d.Ack(ctx, dm...); err != nil {
		t.Fatal(err)
	}
}

// A Nack sends the later in-flight events of its key back with it: the key's order
// holds through the retry, and keyless or other-key events are not held up.
func TestNackKeepsKeyOrder(t *testing.T) {
	_, q := newQueue(t, 1, []string{"g"}, queue.WithRetryBackoff(5*time.Millisecond, 5*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := q.Enqueue(ctx, queue.Event{Key: "k", Payload: []byte("k1")}, queue.Event{Key: "k", Payload: []byte("k2")},
		queue.Event{Key: "other", Payload: []byte("o1")}); err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	msgs, err := c.Receive(ctx, 10)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("%v %v", msgs, err)
	}
	if err := c.Nack(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, msgs[2]); err != nil {
		t.Fatal(err)
	}
	var order []string
	for len(order) < 2 {
		again, err := c.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range again {
			order = append(order, fmt.Sprintf("%s#%d", m.Payload, m.Attempt))
		}
		if err := c.Ack(ctx, again...); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(order) != "[k1#2 k2#1]" {
		t.Fatalf("redelivered %v, want [k1#2 k2#1]", order)
	}
}

// ByPartition keeps each partition's messages in order, partitions in the order they
// first appear.
func TestByPartition(t *testing.T) {
	m := func(p int, seq uint64) *queue.Message { return &queue.Message{Partition: p, Seq: seq} }
	got := queue.ByPartition([]*queue.Message{m(3, 7), m(1, 2), m(3, 8), m(1, 3), m(0, 5)})
	var s []string
	for _, part := range got {
		var seqs []string
		for _, x := range part {
			seqs = append(seqs, fmt.Sprintf("%d/%d", x.Partition, x.Seq))
		}
		s = append(s, strings.Join(seqs, " "))
	}
	if want := "3/7 3/8|1/2 1/3|0/5"; strings.Join(s, "|") != want {
		t.Fatalf("ByPartition = %q, want %q", strings.Join(s, "|"), want)
	}
	if len(queue.ByPartition(nil)) != 0 {
		t.Fatal("ByPartition(nil) is not empty")
	}
}
