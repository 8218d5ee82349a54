package driver

import (
	"context"
	"github.com/dcsync/dcsync"
	"time"
)

// LockInfo is one held lock as a store lists it: its key (level, farm, client, name)
// and its holder's state.
type LockInfo struct {
	Key dcsync.Key
	LockState
}

// LatchInfo is one farm cell of a latch as a store lists it. Stores keep a latch as one
// count per farm and do not record the level it was created at: Key.Level is DC (the
// cell is what a DC reader of Key.Farm sees) and an XDC reader sees the sum of the
// cells of one (client, name). Expires is when the cell ends, by the store's clock
// (zero when the store cannot tell).
type LatchInfo struct {
	Key     dcsync.Key
	Count   int64
	Expires time.Time
}

// LockLister is implemented by stores that can list the live (unexpired) locks of a
// client, at every level and farm. It is an operator's call: on HBase and Aerospike it
// scans the whole lock table or set.
type LockLister interface {
	ListLocks(ctx context.Context, client string) ([]LockInfo, error)
}

// LatchLister is implemented by stores that can list the live farm cells of a
// client's latches. On HBase and Aerospike it scans the whole latch table or set.
type LatchLister interface {
	ListLatches(ctx context.Context, client string) ([]LatchInfo, error)
}

// LatchDeleter is implemented by stores that can delete a latch: at level DC the cell
// of k.Farm, at level XDC every farm's cell of k's name. It returns NotFound, and
// deletes nothing, when no live cell exists.
type LatchDeleter interface {
	DeleteLatch(ctx context.Context, k dcsync.Key) error
}
