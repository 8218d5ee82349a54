package hbase

import (
	"bytes"
	"context"
	"encoding/json"
	"sort"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

var _ driver.QueueLister = (*Store)(nil)

// ListQueues implements driver.QueueLister: every queue's spec, sorted by name. It is
// an operator's call: one Scan of the queue table restricted to the spec column (q:s),
// so the region servers read every row of the table but return only the spec rows, a
// batch of up to 100 per RPC per region; it costs in proportion to the table, not to
// the queues listed.
func (s *Store) ListQueues(ctx context.Context) ([]driver.QueueSpec, error) {
	const op = "hbase.ListQueues"
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return nil, err
	}
	var out []driver.QueueSpec
	scan := hbaserpc.Scan{Columns: []hbaserpc.Column{{Family: famQueue, Qualifier: qualSpec}}}
	err = db.ScanFunc(ctx, table, scan, func(row hbaserpc.Row) error {
		v, ts, ok := cellValue(row.Cells, qualSpec)
		if !ok || isDeleting(v) {
			return nil // a queue being deleted (DeleteQueue) is not listed
		}
		var d specDoc
		if err := json.Unmarshal(v, &d); err != nil {
			return driver.Errorf(dcsync.Internal, op, "spec row %x: bad spec: %v", row.Key, err)
		}
		if !bytes.Equal(row.Key, specRow(d.Name)) {
			return driver.Errorf(dcsync.Internal, op, "spec row %x holds queue %q", row.Key, d.Name)
		}
		out = append(out, d.spec(ts))
		return nil
	})
	if err != nil {
		return nil, wrap(err, op)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
