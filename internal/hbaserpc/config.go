package hbaserpc

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os/user"
	"strings"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Config configures a Client. Only ZKQuorum is required; every zero field takes the
// default documented on it.
type Config struct {
	// ZKQuorum lists the ZooKeeper servers as "host:port,host:port".
	ZKQuorum string
	// ZKRoot is HBase's root znode (zookeeper.znode.parent). Default "/hbase".
	ZKRoot string
	// DialTimeout bounds connecting to ZooKeeper or an HBase server. Default 5s.
	DialTimeout time.Duration
	// RPCTimeout bounds one attempt of one RPC when the context allows longer; it is
	// also sent to the server as the call's timeout. Default 30s.
	RPCTimeout time.Duration
	// MaxAttempts bounds the attempts of one operation, the first included. Default 10.
	MaxAttempts int
	// BackoffBase is the first retry's backoff; it doubles per attempt up to
	// BackoffMax, and each wait is drawn at random between half and all of it.
	// Default 50ms.
	BackoffBase time.Duration
	// BackoffMax caps the backoff between attempts. Default 2s.
	BackoffMax time.Duration
	// Logger receives debug logs (including ZooKeeper's). Default: discard.
	Logger *slog.Logger
	// User is the user name sent in the connection header (SIMPLE auth). Default:
	// the OS user, or "dcsync".
	User string
	// Dial opens every connection the client makes: to region servers and the
	// master (network "tcp", addr "host:port" as HBase advertises it) and to the
	// ZooKeeper servers. ctx bounds the connection attempt only (it carries
	// DialTimeout, and ends when the Client is closed), not the connection's life.
	// It is the place for tests to inject faults (slow, silent or breaking
	// connections) and for deployments to go through a proxy or tunnel. Default: a
	// net.Dialer with DialTimeout and 30s TCP keep-alives.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DropReply, for tests only (nil otherwise), is called by a connection's reader
	// with the RPC method of each reply from a region server or the master before it
	// is delivered. When it returns true the reply is discarded and the connection
	// closed: the call fails with its outcome unknown although the server did what was
	// asked (a reply lost on the way), and is retried only if idempotent. It may block
	// (the reader waits), e.g. to move a region before the caller can retry.
	DropReply func(method string) bool
	// Kerberos, when set, authenticates every connection to HBase with SASL GSSAPI
	// (see Kerberos); nil speaks simple authentication (User). Dial logs in first and
	// fails with Unauthenticated when the KDC refuses the credentials.
	Kerberos *Kerberos
	// TLS, when set, wraps every connection to HBase's region servers and master in
	// TLS (HBase 2.6's native TLS, hbase.server.netty.tls.enabled) with this
	// configuration; an empty ServerName checks the host name HBase advertises. A
	// certificate the client refuses (or a client certificate the server refuses) is
	// Unauthenticated. ZooKeeper is reached without TLS.
	TLS *tls.Config

	krb *krbAuth // the logged-in Kerberos client (Dial)
}

func (c Config) withDefaults() (Config, error) {
	c.ZKQuorum = strings.TrimSpace(c.ZKQuorum)
	if c.ZKQuorum == "" {
		return c, driver.Errorf(dcsync.InvalidArgument, "hbase.Dial", "empty ZooKeeper quorum")
	}
	if c.ZKRoot == "" {
		c.ZKRoot = "/hbase"
	}
	if !strings.HasPrefix(c.ZKRoot, "/") {
		c.ZKRoot = "/" + c.ZKRoot
	}
	c.ZKRoot = strings.TrimRight(c.ZKRoot, "/")
	if c.ZKRoot == "" {
		return c, driver.Errorf(dcsync.InvalidArgument, "hbase.Dial", "root znode must not be /")
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.RPCTimeout <= 0 {
		c.RPCTimeout = 30 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 50 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 2 * time.Second
	}
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = c.BackoffBase
	}
	if c.Dial == nil {
		d := &net.Dialer{Timeout: c.DialTimeout, KeepAlive: 30 * time.Second}
		c.Dial = d.DialContext
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.User == "" {
		c.User = "dcsync"
		if u, err := user.Current(); err == nil && u.Username != "" {
			c.User = u.Username
		}
	}
	return c, nil
}

func (c Config) zkServers() []string {
	var out []string
	for _, s := range strings.Split(c.ZKQuorum, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !strings.Contains(s, ":") {
				s += ":2181"
			}
			out = append(out, s)
		}
	}
	return out
}
