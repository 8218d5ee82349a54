package queue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// A queue with one consumer group: enqueue keyed events, receive them in key order,
// ack them.
func Example() {
	ctx := context.Background()
	s := memory.New() // or sqlite.Open, hbase.Open, aerospike.Open
	defer s.Close()

	q, _ := queue.Create(ctx, s, queue.Spec{Name: "orders", Partitions: 8, Groups: []string{"billing"}})
	q.Enqueue(ctx, queue.Event{Key: "customer-1", ID: "order-1", Payload: []byte("paid")},
		queue.Event{Key: "customer-1", ID: "order-2", Payload: []byte("shipped")})

	c, _ := q.Consumer(ctx, "billing")
	defer c.Close(ctx)
	msgs, _ := c.Receive(ctx, 10)
	for _, m := range msgs {
		fmt.Printf("%s %s\n", m.Key, m.Payload)
	}
	c.Ack(ctx, msgs...)
	// Output:
	// customer-1 paid
	// customer-1 shipped
}

// Enqueueing with the same ids again (say, a retry after a timeout) appends nothing.
func ExampleQueue_Enqueue_idempotent() {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	q, _ := queue.Create(ctx, s, queue.Spec{Name: "q", Partitions: 4, Groups: []string{"g"}})
	ev := queue.Event{Key: "k", ID: "evt-42", Payload: []byte("x")}
	first, _ := q.Enqueue(ctx, ev)
	again, _ := q.Enqueue(ctx, ev)
	fmt.Println(first[0].Duplicate, again[0].Duplicate, again[0].Seq == first[0].Seq)
	// Output: false true true
}

// Nacked messages come back after a backoff; after the last attempt they go to the
// group's dead-letter partition.
func ExampleConsumer_Nack() {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	q, _ := queue.Create(ctx, s, queue.Spec{Name: "q", Partitions: 1, Groups: []string{"g"}},
		queue.WithMaxAttempts(2), queue.WithRetryBackoff(time.Millisecond, time.Millisecond))
	q.Enqueue(ctx, queue.Event{Payload: []byte("poison")})
	c, _ := q.Consumer(ctx, "g")
	defer c.Close(ctx)
	for i := 0; i < 2; i++ {
		m, _ := c.Receive(ctx, 1)
		fmt.Println("attempt", m[0].Attempt)
		c.Nack(ctx, m[0])
	}
	dead, _ := q.Consumer(ctx, "g", queue.DeadLetters())
	defer dead.Close(ctx)
	m, _ := dead.Receive(ctx, 1)
	fmt.Printf("dead: %s from %s\n", m[0].Payload, m[0].DeadFrom)
	dead.Ack(ctx, m...)
	// Output:
	// attempt 1
	// attempt 2
	// dead: poison from 0/0
}
