package hbase

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// Options configures Open: where the cluster is, and the store's tables. Only Quorum is
// required; every zero field takes the default documented on it.
type Options struct {
	// Quorum lists the ZooKeeper servers of the cluster, each "host:port" (a host
	// without a port means port 2181), as hbase.zookeeper.quorum names them.
	Quorum []string
	// ZKRoot is HBase's root znode, zookeeper.znode.parent. Default "/hbase".
	ZKRoot string

	// LockTable is the lock table's name, "table" or "namespace:table". Default
	// "dlm_locks" (DefaultLockTable). Java services sharing locks with dcsync must use
	// the same table.
	LockTable string
	// LatchTableSuffix names the latch table D_LTCH_<suffix>. Default
	// "distributed_latch" (DefaultLatchTableSuffix), the Java default.
	LatchTableSuffix string
	// QueueTable is the queue table's name, "table" or "namespace:table". Default
	// "dcsync_queue" (DefaultQueueTable).
	QueueTable string

	// DialTimeout bounds connecting to ZooKeeper or to one HBase server. Default 5s.
	DialTimeout time.Duration
	// OpenTimeout bounds Open as a whole (every attempt to reach ZooKeeper and locate
	// the meta region), unless ctx ends sooner. Default 5s (DefaultOpenTimeout).
	OpenTimeout time.Duration
	// RPCTimeout bounds one attempt of one RPC when the context allows longer; it is
	// also sent to the server as the call's timeout. Default 30s.
	RPCTimeout time.Duration
	// MaxAttempts bounds the attempts of one RPC, the first included. Default 10.
	MaxAttempts int
	// BackoffBase is the first retry's backoff; it doubles per attempt up to
	// BackoffMax, each wait drawn at random between half and all of it. Default 50ms.
	BackoffBase time.Duration
	// BackoffMax caps the backoff between attempts. Default 2s.
	BackoffMax time.Duration
	// User is the user name the connection presents (SIMPLE authentication; Kerberos
	// is not supported). Default: the OS user, or "dcsync".
	User string

	// Logger receives the store's in-doubt outcomes and the client's debug logs
	// (ZooKeeper's included). Default: discarded.
	Logger *slog.Logger
}

// Open connects to the HBase cluster whose ZooKeeper quorum opts names and returns a
// store that owns the connection: Close closes it. It is the constructor for
// applications outside this module (New takes the module's internal client); OpenURL
// and storeurl.Open take the same settings as a URL.
//
// Open returns once ZooKeeper has answered and the cluster's meta region is located;
// it creates no table (see New: each table is created, when absent, by its first
// call). An unreachable cluster is a Connection error; an empty quorum InvalidArgument.
func Open(ctx context.Context, opts Options) (*Store, error) {
	const op = "hbase.Open"
	var hosts []string
	for _, h := range opts.Quorum {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "no ZooKeeper server in Options.Quorum")
	}
	for _, h := range hosts {
		if strings.Contains(h, ",") {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "quorum entry %q holds a comma: give one server per entry", h)
		}
	}
	cfg := Config{
		LockTable:        opts.LockTable,
		LatchTableSuffix: opts.LatchTableSuffix,
		QueueTable:       opts.QueueTable,
		Logger:           opts.Logger,
	}
	fields := map[string]string{"quorum": "Options.Quorum entry", "lock_table": "Options.LockTable", "queue_table": "Options.QueueTable", "latch_table_suffix": "Options.LatchTableSuffix"}
	if err := checkNames(op, hosts, cfg, func(p string) string { return fields[p] }); err != nil {
		return nil, err
	}
	client, err := dialWithin(ctx, op, opts.OpenTimeout, hbaserpc.Config{
		ZKQuorum:    strings.Join(hosts, ","),
		ZKRoot:      opts.ZKRoot,
		DialTimeout: opts.DialTimeout,
		RPCTimeout:  opts.RPCTimeout,
		MaxAttempts: opts.MaxAttempts,
		BackoffBase: opts.BackoffBase,
		BackoffMax:  opts.BackoffMax,
		Logger:      opts.Logger,
		User:        opts.User,
	})
	if err != nil {
		return nil, err
	}
	return newStore(client, true, cfg), nil
}

// DefaultOpenTimeout bounds Open and OpenURL when no other bound is given.
const DefaultOpenTimeout = 5 * time.Second

// dialWithin dials the cluster of cfg, giving up after within (DefaultOpenTimeout if 0)
// or when ctx ends. An unreachable cluster is a Connection error that says what was
// tried: the quorum, the root znode and for how long.
func dialWithin(ctx context.Context, op string, within time.Duration, cfg hbaserpc.Config) (*hbaserpc.Client, error) {
	if within <= 0 {
		within = DefaultOpenTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	client, err := hbaserpc.Dial(dctx, cfg)
	if err == nil {
		return client, nil
	}
	if ctx.Err() == nil && dctx.Err() != nil || dcsync.CodeOf(err) == dcsync.RetriesExhausted {
		root := cfg.ZKRoot
		if root == "" {
			root = "/hbase"
		}
		return nil, driver.Errorf(dcsync.Connection, op, "could not reach the HBase cluster within %v: %s: %w", within, probeQuorum(ctx, cfg.ZKQuorum, root), err)
	}
	return nil, driver.Wrap(err, dcsync.Connection, op)
}

// probeQuorum says what a failed open tried: each ZooKeeper server and whether a TCP
// connection to it succeeds now (when one does, ZooKeeper answered but no HBase meta
// region was found under root: HBase is down or zk_root is wrong).
func probeQuorum(ctx context.Context, quorum, root string) string {
	var parts []string
	reachable := false
	for _, h := range strings.Split(quorum, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		addr := h
		if !strings.Contains(h, ":") {
			addr = net.JoinHostPort(h, "2181")
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := (&net.Dialer{}).DialContext(pctx, "tcp", addr)
		cancel()
		if err != nil {
			parts = append(parts, "ZooKeeper "+addr+": "+err.Error())
			continue
		}
		c.Close()
		reachable = true
		parts = append(parts, "ZooKeeper "+addr+" accepts connections")
	}
	msg := strings.Join(parts, "; ")
	if reachable {
		msg += "; no HBase meta region was found under znode " + root + " (is HBase running, and is zk_root right?)"
	}
	return msg
}
