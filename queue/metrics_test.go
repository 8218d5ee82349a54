package queue_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/telemetry"
)

// The queue records its metrics (package telemetry's queue metrics) with the meter
// provider of WithMeterProvider: each count below is exact for this run.
func TestQueueMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	_, q := newQueue(t, 2, []string{"g"}, queue.WithMaxAttempts(2),
		queue.WithRetryBackoff(time.Millisecond, 4*time.Millisecond), queue.WithMeterProvider(mp))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := q.Enqueue(ctx, queue.Event{Key: "x", Payload: []byte("poison")}, queue.Event{Key: "x", Payload: []byte("next")},
		queue.Event{Key: "y", ID: "once", Payload: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, queue.Event{Key: "y", ID: "once", Payload: []byte("y")}); err != nil { // a duplicate: not counted
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for attempt := 1; acked < 2; {
		msgs, err := c.Receive(ctx, 1) // one at a time: a Nack sends its key's later deliveries back
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if string(m.Payload) == "poison" {
				if m.Attempt != attempt {
					t.Fatalf("poison delivered at attempt %d, want %d", m.Attempt, attempt)
				}
				attempt++
				if err := c.Nack(ctx, m); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := c.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
			acked++
		}
	}
	collect := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						if v, _ := p.Attributes.Value(telemetry.AttrQueue); v.AsString() == q.Name() {
							out[m.Name] += p.Value
						}
					}
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						out[m.Name] += int64(p.Count)
					}
				}
			}
		}
		return out
	}
	got := collect()
	for name, want := range map[string]int64{
		telemetry.MetricQueueEnqueued:         3,
		telemetry.MetricQueueReceived:         4, // poison twice, next, y
		telemetry.MetricQueueRedelivered:      1,
		telemetry.MetricQueueAcked:            2,
		telemetry.MetricQueueNacked:           2,
		telemetry.MetricQueueDeadLettered:     1,
		telemetry.MetricQueueReceiveToAck:     2,
		telemetry.MetricQueueEnqueueToReceive: 4,
		telemetry.MetricQueueOwned:            2,
		telemetry.MetricQueueZombieAcks:       0,
	} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d", name, got[name], want)
		}
	}
	if got[telemetry.MetricQueueRebalances] < 1 {
		t.Errorf("%s = %d, want at least 1", telemetry.MetricQueueRebalances, got[telemetry.MetricQueueRebalances])
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := collect()[telemetry.MetricQueueOwned]; n != 0 {
		t.Errorf("%s = %d after Close, want 0", telemetry.MetricQueueOwned, n)
	}
}
