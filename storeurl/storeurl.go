// Package storeurl opens a dcsync store named by a URL, for the CLI and for
// applications that take their store from configuration:
//
//	sqlite:///var/lib/app/dcsync.db   one SQLite file (also sqlite:relative/path.db)
//	memory:                           in this process only
//	aerospike://HOST:PORT/NAMESPACE   Aerospike (query: latch_set_suffix, lock_set_suffix,
//	                                  attempts, timeout, retry_delay, op_ids_kept)
//	hbase://ZK_HOST:PORT[,ZK_HOST:PORT]  HBase via its ZooKeeper quorum (query: lock_table,
//	                                  latch_table_suffix, zk_root)
package storeurl

import (
	"context"
	"net/url"
	"strings"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/aerospike"
	"github.com/dcsync/dcsync/store/hbase"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
)

// Open opens the store that raw names. Bad URLs are InvalidArgument.
func Open(ctx context.Context, raw string) (dcsync.Store, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "storeurl.Open", "store URL %q: %w", raw, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "sqlite":
		path := u.Opaque
		if path == "" {
			path = u.Host + u.Path
		}
		if path == "" {
			return nil, dcsync.Errorf(dcsync.InvalidArgument, "storeurl.Open", "store URL %q names no file", raw)
		}
		return sqlite.Open(ctx, path)
	case "memory":
		return memory.New(), nil
	case "aerospike":
		return aerospike.OpenURL(ctx, u)
	case "hbase":
		return hbase.OpenURL(ctx, u)
	}
	return nil, dcsync.Errorf(dcsync.InvalidArgument, "storeurl.Open",
		"store URL %q: unknown scheme %q (want sqlite, memory, hbase or aerospike)", raw, u.Scheme)
}
