package driver

import "context"

// QueueDeleter is implemented by stores that can delete a queue: every record the
// store keeps for it, which is its spec, every storage partition's head and bounds,
// entries (events, tombstones of aborted seqs, trimmed marks), every group's offset
// records, its event-id (dedup) records and its dead-letter partitions (storage
// partitions like the others). The locks of its consumers are not the store's to
// delete here (their keys depend on the consumers' identity): package queue's Delete
// frees them. Every store in this module implements it.
//
// DeleteQueue returns NotFound, deleting nothing, when no queue of that name exists:
// deleting twice is harmless and the second call says so. A queue of the same name
// created afterwards starts empty: sequence numbers from 0, no offsets, no remembered
// event ids.
//
// Order and crashes: on stores with transactions (SQLite) or one mutex (memory) the
// queue goes at once. Elsewhere (HBase, Aerospike) the records go batch by batch and
// the spec goes last: until DeleteQueue returns, the queue exists and its records
// vanish under concurrent users (a read finds a partition emptied, a commit finds no
// offset and gets LockLost, an append may land after its partition was swept and
// outlive the delete), and a DeleteQueue cut short (a crash, an error) leaves the
// queue with its spec, which another DeleteQueue finishes. (HBase first marks the
// queue deleted, so that one cut short leaves it untouched or reading as not found,
// never valid with records gone; a DeleteQueue of a queue so marked finishes it and
// returns nil, and a CreateQueue of the name finishes it first.) Nothing is left that a
// later CreateQueue of the name could mistake for its own, once a DeleteQueue has
// returned nil. After that, this store value's operations on the queue get NotFound;
// another process that had the queue open keeps what it cached of it (see each
// store's doc): stop its producers and consumers before deleting.
type QueueDeleter interface {
	DeleteQueue(ctx context.Context, name string) error
}
