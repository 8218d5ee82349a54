package driver

import "context"

// Baseliner is implemented by stores that can run, next to dcsync's operations, the raw
// back-end operations each one stands on: what the Java libraries send for the same
// operation, or the least the back end needs for it. `dcsync bench` uses it to report
// each operation as a ratio to its floor, measured in the same run on the user's own
// store. Every store in this module implements it.
type Baseliner interface {
	// Baseline prepares records of its own, named with prefix (an id of the caller's
	// choosing, unique per run), and returns the raw operations on them.
	Baseline(ctx context.Context, prefix string) (Baseline, error)
}

// Baseline runs raw back-end operations on the records of one Baseliner.Baseline call.
// It is not safe for concurrent use.
type Baseline interface {
	// Describe names the raw operation of each method for reports: keys "lock",
	// "add" and "get", values such as "gen-0 put + delete".
	Describe() map[string]string
	// LockPair takes and frees a lock record as the Java lock manager does (a
	// create-if-absent write, then a delete): the floor of an acquire plus a release.
	LockPair(ctx context.Context) error
	// Add adds delta to a counter record in one atomic increment: the floor of a
	// count-down.
	Add(ctx context.Context, delta int64) error
	// Get reads the counter record: the floor of a count.
	Get(ctx context.Context) error
	// Close deletes every record the baseline wrote.
	Close(ctx context.Context) error
}

// QueueBaseline is implemented by a Baseline that can also run the raw operations a
// queue stands on, on rows or records of its own shaped as the queue's entries and
// offsets (in the queue's own table or set where the store has one): the floor of an
// enqueue is WriteRows of the same payloads, the floor of a receive and its durable
// ack is ReadRows of the same count plus one CommitOffset per batch. Describe then
// also has keys "enqueue" and "receive". Close deletes the rows too. Every store in
// this module offers it.
type QueueBaseline interface {
	// WriteRows writes one row per payload in one batched call of the back end (one
	// transaction, one multi-put, one batch write).
	WriteRows(ctx context.Context, payloads [][]byte) error
	// ReadRows reads n rows that WriteRows wrote, oldest first from where the last
	// ReadRows ended (starting over at the first row when fewer than n are left), in
	// one call where the back end allows, and returns how many it read.
	ReadRows(ctx context.Context, n int) (int, error)
	// CommitOffset writes next in one plain write of one row or record, as durably
	// as the store writes anything.
	CommitOffset(ctx context.Context, next int64) error
}
