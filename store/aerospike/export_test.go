package aerospike

import (
	"context"

	"github.com/dcsync/dcsync"
)

// AddLatchWithOpID is AddLatch with the update id chosen by the caller: calling it twice
// with one id is what a retry after an in-doubt first try does.
func AddLatchWithOpID(ctx context.Context, s *Store, k dcsync.Key, delta int64, id string) (int64, error) {
	return s.addLatch(ctx, k, delta, []byte(id))
}
