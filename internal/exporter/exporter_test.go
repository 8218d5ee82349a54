package exporter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dcsync/dcsync/internal/exporter"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// The collector reports what the store holds: lag per group and partition and its sum,
// heads, dead letters, the held locks and latch counts of the clients named.
func TestCollectorReportsTheStore(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	q, err := queue.Create(ctx, st, queue.Spec{Name: "orders", Partitions: 2, Groups: []string{"billing", "audit"}})
	if err != nil {
		t.Fatal(err)
	}
	events := make([]queue.Event, 5)
	for i := range events {
		events[i] = queue.Event{Key: "k", Payload: []byte("x")}
	}
	if _, err := q.Enqueue(ctx, events...); err != nil {
		t.Fatal(err)
	}
	p := queue.Partition("k", 2)
	c, err := q.Consumer(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	msgs, err := c.Receive(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	locks, _ := lock.New(st, "app", "dc1", lock.WithTTL(time.Hour))
	if _, err := locks.TryAcquire(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	latches, _ := latch.New(st, "app", "dc1")
	if _, err := latches.CreateCountDown(ctx, "load", 3); err != nil {
		t.Fatal(err)
	}

	col := exporter.New(exporter.Config{Store: st, Clients: []string{"app"}})
	other := 1 - p
	want := `
# HELP dcsync_queue_group_lag Events a consumer group has not acked, over all event partitions.
# TYPE dcsync_queue_group_lag gauge
dcsync_queue_group_lag{group="audit",queue="orders"} 5
dcsync_queue_group_lag{group="billing",queue="orders"} 3
# HELP dcsync_queue_lag Events of an event partition a consumer group has not acked.
# TYPE dcsync_queue_lag gauge
dcsync_queue_lag{group="audit",partition="` + itoa(p) + `",queue="orders"} 5
dcsync_queue_lag{group="audit",partition="` + itoa(other) + `",queue="orders"} 0
dcsync_queue_lag{group="billing",partition="` + itoa(p) + `",queue="orders"} 3
dcsync_queue_lag{group="billing",partition="` + itoa(other) + `",queue="orders"} 0
# HELP dcsync_queue_dead_letters Events in a consumer group's dead letters, not acked there.
# TYPE dcsync_queue_dead_letters gauge
dcsync_queue_dead_letters{group="audit",queue="orders"} 0
dcsync_queue_dead_letters{group="billing",queue="orders"} 0
# HELP dcsync_queue_head Next sequence number of an event partition.
# TYPE dcsync_queue_head gauge
dcsync_queue_head{partition="` + itoa(p) + `",queue="orders"} 5
dcsync_queue_head{partition="` + itoa(other) + `",queue="orders"} 0
# HELP dcsync_queue_partitions Partitions of a queue.
# TYPE dcsync_queue_partitions gauge
dcsync_queue_partitions{queue="orders"} 2
# HELP dcsync_lock_token Fencing token of a held lock's holder.
# TYPE dcsync_lock_token gauge
dcsync_lock_token{client="app",farm="dc1",level="DC",name="nightly"} 1
# HELP dcsync_latch_count Count of a latch's farm cell (an XDC latch's count is the sum over its farms).
# TYPE dcsync_latch_count gauge
dcsync_latch_count{client="app",farm="dc1",name="load"} 3
# HELP dcsync_exporter_up 1 when every store read of the scrape succeeded, else 0.
# TYPE dcsync_exporter_up gauge
dcsync_exporter_up 1
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "dcsync_queue_group_lag", "dcsync_queue_lag",
		"dcsync_queue_dead_letters", "dcsync_queue_head", "dcsync_queue_partitions", "dcsync_lock_token",
		"dcsync_latch_count", "dcsync_exporter_up"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(col, "dcsync_lock_expires_in_seconds"); n != 1 {
		t.Fatalf("%d dcsync_lock_expires_in_seconds series, want 1", n)
	}
}

func itoa(n int) string { return string(rune('0' + n)) }
