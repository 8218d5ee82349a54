// Package hbaserpc is a small HBase 2.x client speaking HBase's native RPC protocol
// (protobuf over TCP) directly: ZooKeeper lookup of hbase:meta and the master,
// region location through hbase:meta with a per-table cache, pipelined connections
// shared by all goroutines, retries with backoff, nonces for non-idempotent
// mutations, and the few admin calls a store needs (create, describe, disable,
// delete a table).
//
// Security: simple authentication by default; Kerberos (SASL GSSAPI with gokrb5,
// quality of protection "auth", Config.Kerberos) and TLS (HBase 2.6's native TLS,
// Config.TLS) on the connections to the region servers and the master. A server or a
// KDC that refuses the client, and a certificate the client refuses, are
// dcsync.Unauthenticated errors, never retried. ZooKeeper is reached without either.
//
// Retries: every operation is retried (up to Config.MaxAttempts, with exponential
// backoff and jitter, all bounded by the caller's context) when the server refused
// it before applying it (region moved or not serving, server busy, ...) or when it
// could not be sent; the region location is dropped and looked up again first.
// When an attempt's outcome is unknown (the connection broke or the RPC timed out
// after the request was written), only idempotent calls are retried: reads, Put,
// Delete, and Increment, which carries a nonce (MutationProto.nonce plus the
// client's nonce group) that every retry of the call reuses, so HBase's nonce
// manager applies it at most once. CheckAndMutate is not retried then (it fails with
// a dcsync.Connection error, meaning "outcome unknown"), unless it is made of
// nonce'd Increments and Deletes at explicit timestamps that leave its condition
// alone (see CheckAndMutate).
//
// Connections: one TCP connection per server and service, shared by all goroutines:
// requests are pipelined and written by one writer goroutine per connection. A
// caller that gives up (its context ends, or Config.RPCTimeout passes) before its
// request is written withdraws it (it is never sent, and may be retried even if not
// idempotent); once written, or being written, a request goes out whole, the caller
// only stops waiting, and a late reply is dropped: one caller's cancellation never
// breaks the connection under the others. A connection is deemed dead, closed, and
// the regions cached on its server dropped (so the next attempt relocates them
// through hbase:meta and dials again), when it breaks, when a call times out with
// nothing at all read on the connection since the call was queued (a server that
// went silent without a reset), or after 3 timeouts in a row with nothing read in
// between; a call that times out while the server keeps answering others is a slow
// call, and changes nothing. Concurrent callers share one dial per server, one
// hbase:meta lookup per table at a time and one ZooKeeper lookup, each waiting only
// as long as its own context allows. Config.Dial opens every connection (the hook
// for fault injection and proxies).
//
// Timestamps: Put and Delete take explicit cell timestamps (a Delete then hides only
// versions at or before its own), and GetWithClock reads a row together with a lower
// bound of its region server's clock, for choosing TTLs relative to the timestamps
// HBase will give new versions.
//
// All errors are *dcsync.Error values (Connection, Internal, TableCreation,
// RetriesExhausted, InvalidArgument); server exceptions are also reachable as
// *RemoteError through errors.As, and a cancelled or expired context is reachable
// with errors.Is(err, context.Canceled / context.DeadlineExceeded).
//
// The protocol messages are generated from a subset of HBase 2.6's .proto files in
// the pb subdirectory (see its package doc to regenerate).
//
// Why it exists: store/hbase needs exact control of what each attempt sends (a nonce
// every retry of an Increment reuses, explicit cell timestamps, a check-and-mutate whose
// unknown outcome is reported, not retried, the region server's clock) and no JVM. It
// is internal because its API is shaped by that one store and changes with it: a user
// reaches HBase through store/hbase (hbase.Open). Besides store/hbase, only the test
// harnesses (internal/faultproxy) and tests import it (internal/archtest enforces that).
package hbaserpc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Client is a connection to one HBase cluster. It is safe for concurrent use; Close
// it when done.
//
// Work that many callers need at once is done once and shared: one dial per server
// (and service), one hbase:meta lookup per table at a time, one ZooKeeper lookup of
// hbase:meta's or the master's location. It runs detached from any one caller's
// context (bounded by the configured timeouts, ended by Close), so that a caller
// giving up ends nobody else's wait; each caller waits for it only as long as its
// own context allows.
type Client struct {
	cfg      Config
	closeKrb sync.Once // stops the Kerberos ticket renewal once
	log      *slog.Logger
	regions  *regionCache

	locMu      sync.Mutex
	metaAddr   string // "" when unknown
	masterAddr string // "" when unknown

	// bg bounds shared work (dials, lookups); stop ends it at Close.
	bg   context.Context
	stop context.CancelFunc
	// flights de-duplicates concurrent lookups (see locate, metaLocation,
	// masterLocation).
	flights singleflight.Group

	connMu sync.Mutex
	conns  map[string]*connSlot
	closed bool
	wg     sync.WaitGroup // dials and shared lookups in progress

	nonceGroup uint64

	metaScans atomic.Int64 // hbase:meta lookups made (for tests and debugging)
	calls     sync.Map     // method -> *atomic.Int64: RPCs sent (Calls)

	// Test hooks.
	dropResponse func(method string) bool // see rpcConn.dropResponse
	noNonces     bool                     // send no nonces (to show what they prevent)
}

// connSlot holds the connection to one server for one service, or the dial of one
// in progress. Its fields are guarded by Client.connMu.
type connSlot struct {
	c    *rpcConn
	dial *dialCall
}

// dialCall is a dial in progress; done is closed when c or err is set.
type dialCall struct {
	done chan struct{}
	c    *rpcConn
	err  error
}

// errClientClosed is returned by calls made after (or cut short by) Close. It is
// final: the retry loop returns it as is.
func errClientClosed() error {
	return driver.Errorf(dcsync.Connection, "hbase", "client is closed")
}

// Dial checks the configuration, finds hbase:meta through ZooKeeper, and returns a
// Client. Connections to region servers and the master are made on first use. It
// fails with a dcsync.Connection error when ZooKeeper or HBase cannot be reached
// before ctx ends.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Kerberos != nil {
		if cfg.krb, err = cfg.Kerberos.login(); err != nil {
			return nil, err
		}
	}
	c := newClient(cfg)
	err = c.retry(ctx, "hbase.Dial", true, func(ctx context.Context) error {
		addr, err := c.metaLocation(ctx)
		if err != nil || (cfg.krb == nil && cfg.TLS == nil) {
			return err
		}
		// With Kerberos or TLS, connect to the meta region's server now: credentials
		// or a certificate that a server refuses fail Dial, not the first call.
		_, err = c.conn(ctx, addr, serviceClient)
		return err
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func newClient(cfg Config) *Client {
	bg, stop := context.WithCancel(context.Background())
	return &Client{
		cfg:        cfg,
		log:        cfg.Logger,
		regions:    newRegionCache(),
		bg:         bg,
		stop:       stop,
		conns:      make(map[string]*connSlot),
		nonceGroup: randUint64(),

		dropResponse: cfg.DropReply,
	}
}

// Close closes every connection, failing calls in flight, and waits for the
// client's goroutines to exit. The Client cannot be used afterwards.
func (c *Client) Close() error {
	c.connMu.Lock()
	c.closed = true
	var conns []*rpcConn
	for _, s := range c.conns {
		if s.c != nil {
			conns = append(conns, s.c)
			s.c = nil
		}
	}
	c.conns = map[string]*connSlot{}
	c.connMu.Unlock()
	c.stop()
	for _, rc := range conns {
		rc.close(errConnClosed)
	}
	c.wg.Wait()
	if c.cfg.krb != nil {
		c.closeKrb.Do(c.cfg.krb.close)
	}
	return nil
}

// track counts a goroutine doing shared work, for Close to wait for; it returns
// false (counting nothing) once the client is closed.
func (c *Client) track() bool {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// shared runs fn once for all the callers that ask for key while it runs, detached
// from their contexts (fn gets one that Close ends); each caller waits for the
// result only until its own ctx ends.
func (c *Client) shared(ctx context.Context, key string, fn func(context.Context) (any, error)) (any, error) {
	ch := c.flights.DoChan(key, func() (any, error) {
		if !c.track() {
			return nil, errClientClosed()
		}
		defer c.wg.Done()
		return fn(c.bg)
	})
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// conn returns a live connection to addr for service, dialing one if needed.
// Concurrent callers share one dial; each waits for it only until its ctx ends
// (the dial goes on, bounded by Config.DialTimeout, for the others and later
// callers).
func (c *Client) conn(ctx context.Context, addr, service string) (*rpcConn, error) {
	key := service + "@" + addr
	c.connMu.Lock()
	if c.closed {
		c.connMu.Unlock()
		return nil, errClientClosed()
	}
	s := c.conns[key]
	if s == nil {
		s = &connSlot{}
		c.conns[key] = s
	}
	if s.c != nil && s.c.alive() {
		rc := s.c
		c.connMu.Unlock()
		return rc, nil
	}
	dead := s.c
	s.c = nil
	d := s.dial
	if d == nil {
		d = &dialCall{done: make(chan struct{})}
		s.dial = d
		c.wg.Add(1)
		go c.dial(s, d, addr, service)
	}
	c.connMu.Unlock()
	if dead != nil {
		dead.close(errConnClosed) // reap the dead one's goroutines
	}
	select {
	case <-d.done:
		return d.c, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dial makes the connection of slot s and hands it to d's waiters.
func (c *Client) dial(s *connSlot, d *dialCall, addr, service string) {
	defer c.wg.Done()
	rc, err := dialConn(c.bg, c.cfg, addr, service, c.dropResponse)
	if err != nil && c.bg.Err() != nil {
		err = errClientClosed()
	}
	c.connMu.Lock()
	s.dial = nil
	closed := c.closed
	if err == nil && !closed {
		s.c = rc
	}
	c.connMu.Unlock()
	if err == nil && closed {
		rc.close(errConnClosed)
		rc, err = nil, errClientClosed()
	}
	d.c, d.err = rc, err
	close(d.done)
}

// rpc makes one call to addr, bounded by ctx and the configured RPC timeout.
func (c *Client) rpc(ctx context.Context, addr, service, method string, req, resp proto.Message) error {
	rc, err := c.conn(ctx, addr, service)
	if err != nil {
		return err
	}
	n, ok := c.calls.Load(method)
	if !ok {
		n, _ = c.calls.LoadOrStore(method, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
	return rc.call(ctx, method, req, resp, c.cfg.RPCTimeout)
}

// Calls returns how many RPCs the client has sent since it was dialed, by method of
// the protocol ("Get", "Mutate", "Multi", "Scan", ...; hbase:meta lookups included):
// each is one round trip to a server. Counting costs no lock; tests and benchmarks
// take differences of two snapshots.
func (c *Client) Calls() map[string]int64 {
	out := map[string]int64{}
	c.calls.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// retry runs attempt until it succeeds, fails for good, runs out of attempts, or
// ctx ends. idempotent says whether an attempt whose outcome is unknown (a lost
// reply) may be sent again; attempts refused by the server before being applied
// are always retried.
func (c *Client) retry(ctx context.Context, op string, idempotent bool, attempt func(context.Context) error) error {
	var last error
	for n := 1; ; n++ {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return driver.Errorf(dcsync.Connection, op, "%v: gave up: %w", err, ctx.Err())
		}
		last = err
		switch classify(err) {
		case kindFatal:
			return toDcsync(op, err)
		case kindInDoubt:
			if !idempotent {
				return toDcsync(op, err)
			}
		case kindCancelled:
			return toDcsync(op, err)
		}
		if n >= c.cfg.MaxAttempts {
			return driver.Errorf(dcsync.RetriesExhausted, op, "%d attempts: %w", n, toDcsync(op, last))
		}
		c.log.Debug("hbase: retrying", "op", op, "attempt", n, "err", err)
		if err := c.sleep(ctx, n); err != nil {
			return driver.Errorf(dcsync.Connection, op, "%v: gave up: %w", last, err)
		}
	}
}

// sleep waits the backoff before attempt n+1: full jitter over an exponentially
// growing cap.
func (c *Client) sleep(ctx context.Context, n int) error {
	capd := c.cfg.BackoffBase << min(n-1, 20)
	if capd <= 0 || capd > c.cfg.BackoffMax {
		capd = c.cfg.BackoffMax
	}
	d := capd/2 + time.Duration(mrand.Int64N(int64(capd/2)+1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func asRemote(err error) (*RemoteError, bool) {
	var re *RemoteError
	ok := errors.As(err, &re)
	return re, ok
}

func randUint64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return mrand.Uint64()
	}
	return binary.BigEndian.Uint64(b[:])
}

// newNonce returns a fresh non-zero nonce (HBase treats 0 as "no nonce").
func (c *Client) newNonce() uint64 {
	if c.noNonces {
		return 0
	}
	for {
		if n := randUint64(); n != 0 {
			return n
		}
	}
}
