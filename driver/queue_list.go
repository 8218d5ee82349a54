package driver

import "context"

// QueueLister is implemented by stores that can list their queues: the spec of every
// queue in the store, sorted by name. It is an operator's call (dcsync queue list): on
// HBase and Aerospike it scans every queue's spec row or record, in batches, and costs
// in proportion to the queues in the store, not to their events.
type QueueLister interface {
	ListQueues(ctx context.Context) ([]QueueSpec, error)
}
