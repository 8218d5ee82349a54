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
