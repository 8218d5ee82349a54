package aerospike

import (
	"context"
	"sort"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueLister = (*Store)(nil)

// ListQueues implements driver.QueueLister: every queue's spec, sorted by name. It is
// an operator's call: one scan of the spec set (QueueSpecSet) only, whose records the
// server streams in batches per node; it costs in proportion to the queues in the
// namespace, not to their events. A record without a name bin (not written by
// CreateQueue) is skipped, and so is a queue being deleted (its spec record holds a
// deletion mark: see DeleteQueue).
func (s *Store) ListQueues(ctx context.Context) ([]driver.QueueSpec, error) {
	const op = "aerospike.ListQueues"
	var out []driver.QueueSpec
	err := s.scan(ctx, op, QueueSpecSet, func(r *as.Record) {
		name, ok := r.Bins[qbName].(string)
		if !ok || name == "" || deletingMark(r) != 0 {
			return
		}
		out = append(out, specOf(name, r.Bins))
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
