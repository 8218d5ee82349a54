package aerospike

import (
	"context"

	"github.com/dcsync/dcsync"
)

// OpID is an update's id.
type OpID = opID

// NewOpID returns the id of a writer's first update: a writer of its own, as another
// Store would have.
func NewOpID() OpID { return newWriters().acquire() }

// Next returns the id of the writer's next update.
func Next(id OpID) OpID { return opID{writer: id.writer, seq: id.seq + 1} }

// AddLatchWithOpID is AddLatch with the update id chosen by the caller: calling it twice
// with one id is what a retry after an in-doubt first try does.
func AddLatchWithOpID(ctx context.Context, s *Store, k dcsync.Key, delta int64, id OpID) (int64, error) {
	return s.addLatch(ctx, k, delta, id)
}
