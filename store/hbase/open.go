package hbase

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
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
	// OpenTimeout bounds Open as a whole (every attempt to locate the cluster's meta
	// region through ZooKeeper), when ctx does not end sooner. Default: none beyond
	// ctx. Either way a quorum where no server accepts a TCP connection fails at once
	// (each server tried for DialTimeout).
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
	// User is the user name the connection presents with simple authentication (no
	// Kerberos). Default: the OS user, or "dcsync".
	User string
	// Kerberos, when set, authenticates to a Kerberized cluster (SASL GSSAPI); a
	// cluster that refuses the credentials fails Open or the first call with
	// Unauthenticated. See Kerberos.
	Kerberos *Kerberos
	// TLS, when set, speaks TLS to the region servers and the master (HBase 2.6's
	// native TLS): ServerName "" checks each server's advertised host name. An
	// untrusted certificate is Unauthenticated. ZooKeeper is reached without TLS.
	TLS *tls.Config

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
		Kerberos:    opts.Kerberos.rpc(),
		TLS:         opts.TLS,
	})
	if err != nil {
		return nil, err
	}
	return newStore(client, true, cfg), nil
}

// An open first checks that some ZooKeeper server of the quorum accepts a TCP
// connection (each tried for DialTimeout, in parallel): when none does, it fails at
// once with what each answered, instead of retrying for seconds. A reachable but slow
// cluster is then given as long as ctx (or OpenTimeout, when set) allows: a busy
// machine is not an unreachable cluster.

// dialWithin dials the cluster of cfg, giving up after within (no bound of its own if 0)
// or when ctx ends. An unreachable cluster is a Connection error that says what was
// tried: each ZooKeeper server and what it answered, or that ZooKeeper answers but no
// HBase was found under the root znode.
func dialWithin(ctx context.Context, op string, within time.Duration, cfg hbaserpc.Config) (*hbaserpc.Client, error) {
	root := cfg.ZKRoot
	if root == "" {
		root = "/hbase"
	}
	dialTimeout := cfg.DialTimeout
	if dialTimeout <= 0 {
		dialTimeout = 5 * time.Second
	}
	if tried, reachable := probeQuorum(ctx, cfg.ZKQuorum, dialTimeout); !reachable && ctx.Err() == nil {
		return nil, driver.Errorf(dcsync.Connection, op, "could not reach the HBase cluster: no ZooKeeper server accepts connections: %s", tried)
	}
	dctx := ctx
	if within > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, within)
		defer cancel()
	}
	client, err := hbaserpc.Dial(dctx, cfg)
	if err == nil {
		return client, nil
	}
	if c := dcsync.CodeOf(err); c == dcsync.Unauthenticated || c == dcsync.InvalidArgument {
		return nil, driver.Wrap(err, c, op)
	}
	if ctx.Err() == nil && dctx.Err() != nil || dcsync.CodeOf(err) == dcsync.RetriesExhausted {
		tried, _ := probeQuorum(ctx, cfg.ZKQuorum, dialTimeout)
		what := "gave up"
		if within > 0 && dctx.Err() != nil {
			what = "gave up after " + within.String()
		}
		return nil, driver.Errorf(dcsync.Connection, op, "could not reach the HBase cluster (%s): %s; no HBase meta region was found under znode %s (is HBase running, and is zk_root right?): %w", what, tried, root, err)
	}
	return nil, driver.Wrap(err, dcsync.Connection, op)
}

// probeQuorum tries a TCP connection to every ZooKeeper server of quorum at once, each
// for at most timeout, and says what each answered; reachable reports that one
// accepted.
func probeQuorum(ctx context.Context, quorum string, timeout time.Duration) (tried string, reachable bool) {
	var addrs []string
	for _, h := range strings.Split(quorum, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if !strings.Contains(h, ":") {
			h = net.JoinHostPort(h, "2181")
		}
		addrs = append(addrs, h)
	}
	answers := make([]string, len(addrs))
	ok := make([]bool, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			c, err := (&net.Dialer{}).DialContext(pctx, "tcp", addr)
			if err != nil {
				answers[i] = "ZooKeeper " + addr + ": " + err.Error()
				return
			}
			c.Close()
			ok[i] = true
			answers[i] = "ZooKeeper " + addr + " accepts connections"
		}()
	}
	wg.Wait()
	return strings.Join(answers, "; "), slices.Contains(ok, true)
}
