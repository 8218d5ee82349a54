package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync/telemetry"
)

// Each QueueScope method records on its instrument, under the store, queue and group.
func TestQueueInstruments(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	q := telemetry.QueueScope{In: telemetry.For(h.mp, h.tp), Store: "sqlite", Queue: "orders"}
	q.Enqueued(ctx, 3)
	g := q.ForGroup("billing")
	g.Received(ctx, 1, time.Now().Add(-time.Second))
	g.Received(ctx, 2, time.Time{})
	g.Acked(ctx, time.Now())
	g.ZombieAcks(ctx, 2)
	g.Nacked(ctx, 1)
	g.DeadLettered(ctx, 1)
	g.Owned(ctx, 4)
	g.Owned(ctx, -1)
	g.Rebalanced(ctx)
	ms := h.collect(t)
	qa := map[string]string{telemetry.AttrStore: "sqlite", telemetry.AttrQueue: "orders"}
	ga := map[string]string{telemetry.AttrStore: "sqlite", telemetry.AttrQueue: "orders", telemetry.AttrGroup: "billing"}
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"enqueued", sum(t, ms, telemetry.MetricQueueEnqueued, qa), 3},
		{"received", sum(t, ms, telemetry.MetricQueueReceived, ga), 2},
		{"redelivered", sum(t, ms, telemetry.MetricQueueRedelivered, ga), 1},
		{"acked", sum(t, ms, telemetry.MetricQueueAcked, ga), 1},
		{"zombie acks", sum(t, ms, telemetry.MetricQueueZombieAcks, ga), 2},
		{"nacked", sum(t, ms, telemetry.MetricQueueNacked, ga), 1},
		{"dead lettered", sum(t, ms, telemetry.MetricQueueDeadLettered, ga), 1},
		{"owned", sum(t, ms, telemetry.MetricQueueOwned, ga), 3},
		{"rebalances", sum(t, ms, telemetry.MetricQueueRebalances, ga), 1},
		{"enqueue to receive", int64(count(t, ms, telemetry.MetricQueueEnqueueToReceive, ga)), 1},
		{"receive to ack", int64(count(t, ms, telemetry.MetricQueueReceiveToAck, ga)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
}
