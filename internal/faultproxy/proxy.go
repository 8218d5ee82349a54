// Package faultproxy puts a TCP fault proxy in front of a real server (the HBase region
// server, Aerospike) for the tests: it delays traffic, drops replies after the server
// did what was asked, resets connections, and holds a request back to deliver it after
// later requests of the same client, even after that client gave up and closed the
// connection (the late-landing first attempt of a retried write).
//
// The proxy is toxiproxy (github.com/Shopify/toxiproxy/v2) used as a library, in
// process: it accepts, dials the server and pumps each direction of each connection
// through a chain of toxics; stopping and starting it resets every connection. The
// toxics are this package's, installed once when the proxy starts and driven from
// shared state, because toxiproxy's own act on every connection for as long as they are
// installed (dropping the replies of the next n connections only needs state per
// connection), and changing a built-in's settings on a running proxy is a data race
// (UpdateToxicJson decodes into the value the connections read) while adding or
// removing one interrupts its neighbours. toxiproxy can hold a request past the
// client's close because a link closes its server connection only when the last toxic
// of its chain closes: a toxic that outlives its input keeps the server side open,
// writes what it held, and closes once the server answered.
//
// The proxy knows nothing of the protocol: a fault hits whatever request or reply comes
// next, reads included. Faults are counted by kind (Counts).
//
// Why it exists: a real server does not, on demand, drop a reply after applying a write
// or deliver a retried request's first attempt after the retry, and a store's in-doubt
// handling is only tested if something does. It is internal because it serves this
// repository's tests (the stores' and internal/chaos's; it takes a testing.TB) and its
// faults follow what those tests need. Only tests and the other test harnesses
// (internal/chaos) may import it (internal/archtest enforces that).
package faultproxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// DefaultMaxHold is how long a held request waits, at most, for its client to give up
// and for a later request to be answered, before it is delivered anyway.
const DefaultMaxHold = 5 * time.Second

// Proxy is a fault proxy listening on a loopback port in front of one server. It is safe
// for concurrent use.
type Proxy struct {
	upstream string
	key      string
	tp       *toxiproxy.Proxy
	ctl      *control

	mu       sync.Mutex // serialises faults that change the proxy (delay, reset)
	closed   bool
	undo     *time.Timer
	delays   atomic.Int64
	resets   atomic.Int64
	restarts atomic.Int64
	injected atomic.Int64
}

// Counts is what a proxy injected, by kind.
type Counts struct {
	// Delays is the number of delay windows (Delay with a non-zero latency).
	Delays int64
	// DroppedReplies is the number of connections whose reply was dropped (DropReplies).
	DroppedReplies int64
	// Resets is the number of times every connection was closed (ResetConnections).
	Resets int64
	// Held is the number of requests held back (Hold); each ends as one of the next three.
	Held int64
	// HeldLate is the number of held requests delivered after their client closed the
	// connection: a late landing, after the client's later requests.
	HeldLate int64
	// HeldEarly is the number delivered while their client still waited (a delay).
	HeldEarly int64
	// HeldLost is the number never delivered (a reset or Close came first).
	HeldLost int64
	// ServerRestarts counts what the caller reported with CountRestart.
	ServerRestarts int64
}

// Map returns the non-zero counts by name, for logs and chaos reports.
func (c Counts) Map() map[string]int64 {
	m := map[string]int64{}
	for _, kv := range []struct {
		k string
		v int64
	}{
		{"delay", c.Delays}, {"dropped-reply", c.DroppedReplies}, {"reset", c.Resets},
		{"held", c.Held}, {"held-late", c.HeldLate}, {"held-early", c.HeldEarly},
		{"held-lost", c.HeldLost}, {"server-restart", c.ServerRestarts},
	} {
		if kv.v != 0 {
			m[kv.k] = kv.v
		}
	}
	return m
}

func (c Counts) String() string {
	return fmt.Sprintf("delay=%d dropped-reply=%d reset=%d held=%d (late=%d early=%d lost=%d) server-restart=%d",
		c.Delays, c.DroppedReplies, c.Resets, c.Held, c.HeldLate, c.HeldEarly, c.HeldLost, c.ServerRestarts)
}

var (
	keys   atomic.Int64
	server = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
)

// New starts a proxy to upstream ("host:port") on a free loopback port.
func New(upstream string) (*Proxy, error) {
	key := fmt.Sprintf("faultproxy-%d", keys.Add(1))
	ctl := &control{release: make(chan struct{}), closing: make(chan struct{})}
	ctl.maxHold.Store(int64(DefaultMaxHold))
	controls.Store(key, ctl)
	tp := toxiproxy.NewProxy(server, key, "127.0.0.1:0", upstream)
	for _, spec := range []string{
		`{"name":"hold","type":"` + holdToxicType + `","stream":"upstream","attributes":{"control":"` + key + `"}}`,
		`{"name":"delay_up","type":"` + delayToxicType + `","stream":"upstream","attributes":{"control":"` + key + `"}}`,
		`{"name":"drop","type":"` + dropToxicType + `","stream":"downstream","attributes":{"control":"` + key + `"}}`,
		`{"name":"delay_down","type":"` + delayToxicType + `","stream":"downstream","attributes":{"control":"` + key + `"}}`,
	} {
		if _, err := tp.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			controls.Delete(key)
			return nil, fmt.Errorf("faultproxy: toxic %s: %w", spec, err)
		}
	}
	if err := tp.Start(); err != nil {
		controls.Delete(key)
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	return &Proxy{upstream: upstream, key: key, tp: tp, ctl: ctl}, nil
}

// Start starts a proxy to upstream for t and closes it when t ends.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's "host:port": clients connect here instead of to the server.
func (p *Proxy) Addr() string {
	p.tp.Lock()
	defer p.tp.Unlock()
	return p.tp.Listen
}

// Upstream is the server's address.
func (p *Proxy) Upstream() string { return p.upstream }

// Dial connects to the proxy, whatever addr says; it has the signature of
// net.Dialer.DialContext.
func (p *Proxy) Dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, p.Addr())
}

// DialFunc opens a connection, as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Redirect returns a dial function that connects to the proxy when asked for the
// proxy's upstream address and with next (nil: a net.Dialer) otherwise. It is what
// routes an HBase client's region-server connections, whose address the client learns
// from ZooKeeper and hbase:meta, through the proxy (internal/hbaserpc Config.Dial).
func (p *Proxy) Redirect(next DialFunc) DialFunc {
	if next == nil {
		var d net.Dialer
		next = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == p.upstream {
			return p.Dial(ctx, network, addr)
		}
		return next(ctx, network, addr)
	}
}

// Delay delays every chunk of traffic, both ways, by latency plus or minus jitter, until
// the next Delay; Delay(0, 0) ends it.
func (p *Proxy) Delay(latency, jitter time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delayLocked(latency, jitter)
}

func (p *Proxy) delayLocked(latency, jitter time.Duration) error {
	if p.closed {
		return nil
	}
	if p.undo != nil {
		p.undo.Stop()
		p.undo = nil
	}
	p.ctl.latency.Store(int64(max(latency, 0)))
	p.ctl.jitter.Store(int64(max(jitter, 0)))
	if latency > 0 {
		p.delays.Add(1)
	}
	return nil
}

// DelayFor delays traffic as Delay does, for the window d only.
func (p *Proxy) DelayFor(latency, jitter, d time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.delayLocked(latency, jitter); err != nil {
		return err
	}
	var timer *time.Timer
	timer = time.AfterFunc(d, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.undo == timer {
			_ = p.delayLocked(0, 0)
		}
	})
	p.undo = timer
	return nil
}

// DropReplies drops the next reply chunk of each of the next n connections that get one,
// and every later byte the server sends on those connections: the server did what it
// was asked; the client hears nothing and times out, in doubt. Calls accumulate.
func (p *Proxy) DropReplies(n int) { p.ctl.dropArmed.Add(int64(n)) }

// Hold holds back the next request chunk of each of the next n connections that send
// one (with whatever follows it on that connection) until the client closed the
// connection and a later request went up and was answered on another connection, then
// delivers it to the server; or at MaxHold, or at ReleaseHeld, whichever comes first.
// Calls accumulate.
func (p *Proxy) Hold(n int) { p.HoldMatching(n, nil) }

// HoldMatching holds as Hold does the next n request chunks for which match (given the
// chunk's bytes, which it must not keep) is true; nil matches any. A chunk is what one
// read from the client returned: with a client that writes each request whole, one
// request (or several pipelined ones). Rules accumulate, the first matching one applies.
func (p *Proxy) HoldMatching(n int, match func(chunk []byte) bool) {
	if n > 0 {
		p.ctl.addHold(n, match)
	}
}

// SetMaxHold sets how long a request is held at most (DefaultMaxHold unless set).
func (p *Proxy) SetMaxHold(d time.Duration) { p.ctl.maxHold.Store(int64(d)) }

// ReleaseHeld delivers every request held now.
func (p *Proxy) ReleaseHeld() { p.ctl.releaseAll() }

// Disarm cancels the drops and holds that were asked for but have not happened yet.
func (p *Proxy) Disarm() {
	p.ctl.dropArmed.Store(0)
	p.ctl.clearHolds()
}

// Abandoned returns how many held requests saw their client close the connection while
// held. A test waits for it before its later request, so that the held request's
// delivery cannot be explained by the close alone.
func (p *Proxy) Abandoned() int64 { return p.ctl.abandoned.Load() }

// WaitAbandoned waits until Abandoned is at least n, or ctx ends.
func (p *Proxy) WaitAbandoned(ctx context.Context, n int64) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for p.Abandoned() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("faultproxy: %d held request(s) abandoned, want %d: %w", p.Abandoned(), n, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// Settled reports whether every held request was delivered or lost.
func (p *Proxy) Settled() bool {
	c := p.Counts()
	return c.Held == c.HeldLate+c.HeldEarly+c.HeldLost
}

// WaitSettled waits until every held request was delivered (and, for a client that had
// gone, answered by the server) or lost, or ctx ends.
func (p *Proxy) WaitSettled(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !p.Settled() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("faultproxy: held requests not settled (%v): %w", p.Counts(), ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// ResetConnections closes every connection through the proxy, both sides, and listens
// again on the same port: a client sees its connections break, as when the server
// restarts. A held request whose server side is closed is lost.
func (p *Proxy) ResetConnections() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.ctl.epoch.Add(1)
	p.tp.Stop()
	p.resets.Add(1)
	var err error
	for i := 0; i < 100; i++ {
		if err = p.tp.Start(); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("faultproxy: listen again on %s: %w", p.tp.Listen, err)
}

// CountRestart records a server restart done by the caller, so that Counts reports
// every fault of a run.
func (p *Proxy) CountRestart() { p.restarts.Add(1) }

// Counts returns what the proxy injected so far.
func (p *Proxy) Counts() Counts {
	return Counts{
		Delays: p.delays.Load(), DroppedReplies: p.ctl.dropped.Load(), Resets: p.resets.Load(),
		Held: p.ctl.held.Load(), HeldLate: p.ctl.late.Load(), HeldEarly: p.ctl.early.Load(),
		HeldLost: p.ctl.lost.Load(), ServerRestarts: p.restarts.Load(),
	}
}

// Fault kinds, as Inject returns them.
const (
	FaultDelay        = "delay"
	FaultDroppedReply = "dropped-reply"
	FaultReset        = "reset"
	FaultHold         = "held-request"
)

// injectOrder is the order in which Inject goes through the kinds: every kind within
// four faults, dropped replies and held requests three times as often as resets.
var injectOrder = []string{
	FaultDroppedReply, FaultHold, FaultDelay, FaultReset,
	FaultDroppedReply, FaultHold, FaultDroppedReply, FaultHold, FaultDelay,
}

// Inject injects the next fault of a fixed rotation (so that a short run has every
// kind) with parameters drawn from r: a delay window (20–200 ms each way, for
// 0.5–1.5 s), one or two dropped replies, a reset of every connection, or a held
// request. It returns the fault's kind, for a chaos run's Fault function.
func (p *Proxy) Inject(r *rand.Rand) string {
	kind := injectOrder[(p.injected.Add(1)-1)%int64(len(injectOrder))]
	switch kind {
	case FaultDelay:
		lat := time.Duration(20+r.IntN(180)) * time.Millisecond
		_ = p.DelayFor(lat, lat/4, time.Duration(500+r.IntN(1000))*time.Millisecond)
	case FaultDroppedReply:
		p.DropReplies(1 + r.IntN(2))
	case FaultReset:
		_ = p.ResetConnections()
	case FaultHold:
		p.Hold(1)
	}
	return kind
}

// Close stops the proxy: held requests are dropped, every connection is closed, and
// the toxics' goroutines end.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.undo != nil {
		p.undo.Stop()
	}
	p.mu.Unlock()
	p.Disarm()
	close(p.ctl.closing)
	p.ctl.epoch.Add(1)
	p.tp.Stop()
	controls.Delete(p.key)
}
