package aerospike_test

import (
	"slices"
	"testing"

	"github.com/dcsync/dcsync/store/aerospike"
)

// TestQueueLateDeleteWrites holds back the first try of one of DeleteQueue's writes to
// the spec record (the deletion mark; the spec record's delete, last) in the fault
// proxy: its retry lands and the delete finishes, the queue is created again under the
// name, then the held try is delivered. It must change nothing: the mark expects the
// generation read and is filtered on the writer id and creation time read (the new
// queue has generation 1 too, as the deleted one had: without the filter the late mark
// made the new queue read as deleted), the delete is filtered on the mark (without the
// filter it deleted the new queue's spec).
func TestQueueLateDeleteWrites(t *testing.T) {
	addr := realServer(t)
	for _, tc := range []struct {
		name  string
		match func(command) bool
	}{
		{"Mark", func(c command) bool {
			return c.Set == aerospike.QueueSpecSet && c.Kind == "write" && slices.Contains(c.Bins, "del")
		}},
		{"SpecDelete", func(c command) bool {
			return c.Set == aerospike.QueueSpecSet && (c.Kind == "delete" || slices.Contains(c.Ops, 14))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := startProxy(t)
			s := queueStore(t, proxy.Addr())
			d := queueStore(t, addr)
			ctx := ctxT(t)
			spec := newQueue(t, d, 1)
			proxy.HoldRequests(1, tc.match)
			must(t, s.DeleteQueue(ctx, spec.Name), "DeleteQueue whose first try of a write was held back")
			if n := proxy.Held(); n != 1 {
				t.Fatalf("%d requests held, want 1", n)
			}
			must(t, d.CreateQueue(ctx, spec), "CreateQueue again")
			codes, err := proxy.Deliver()
			must(t, err, "Deliver")
			t.Logf("the late try was answered with result code %v (27: filtered out)", codes)
			r := queueStore(t, addr) // caches nothing
			if _, err := r.ReadQueueSpec(ctx, spec.Name); err != nil {
				t.Fatalf("the queue created again, after the late try of a delete's write: %v", err)
			}
			must(t, r.DeleteQueue(ctx, spec.Name), "DeleteQueue")
		})
	}
}
