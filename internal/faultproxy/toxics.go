package faultproxy

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// The two toxics below are registered with toxiproxy under these names. toxiproxy makes a
// toxic from JSON (a new value of the registered type, its attributes decoded into it),
// so a toxic finds the Proxy that drives it through the control registry, by the key in
// its attributes.
const (
	holdToxicType  = "dcsync_hold"
	dropToxicType  = "dcsync_drop"
	delayToxicType = "dcsync_delay"
)

func init() {
	toxics.Register(holdToxicType, new(holdToxic))
	toxics.Register(dropToxicType, new(dropToxic))
	toxics.Register(delayToxicType, new(delayToxic))
}

var controls sync.Map // key (string) -> *control

// control is the state a Proxy shares with its toxics.
type control struct {
	holdMu    sync.Mutex
	holds     []*holdRule // requests still to hold
	nholds    atomic.Int64
	dropArmed atomic.Int64 // replies still to drop
	release   chan struct{}
	relGen    atomic.Int64 // counts ReleaseHeld calls
	relMu     sync.Mutex
	closing   chan struct{}
	maxHold   atomic.Int64 // nanoseconds
	// epoch counts the connection resets: a request held across one is lost (its server
	// connection was closed under it).
	epoch atomic.Int64
	// latency and jitter (nanoseconds) are the delay toxic's settings.
	latency, jitter atomic.Int64
	// A held request waits until a later request went up and a reply came back after
	// it, on other connections: seq numbers the chunks forwarded either way, lastDown is
	// the number of the last reply chunk, and waiting are the held requests that wait
	// for their first later request (firstUp).
	seq, lastDown atomic.Int64
	wmu           sync.Mutex
	waiting       map[*holdState]bool
	nwaiting      atomic.Int64

	// pending pairs a connection's two directions: toxiproxy starts the request link and
	// then the reply link of each accepted connection, one connection at a time, and
	// asks each toxic of a link for its per-connection state as the link starts; the
	// hold toxic's state is pushed here and the drop toxic's takes it.
	pendMu  sync.Mutex
	pending []*conn

	held, late, early, lost, dropped atomic.Int64
	abandoned                        atomic.Int64 // held requests whose client closed
}

// conn is one proxied connection, seen by both of its toxics.
type conn struct {
	replies atomic.Int64 // reply chunks from the server
}

func (c *control) releaseCh() chan struct{} {
	c.relMu.Lock()
	defer c.relMu.Unlock()
	return c.release
}

// releaseAll wakes every held request.
func (c *control) releaseAll() {
	c.relMu.Lock()
	defer c.relMu.Unlock()
	c.relGen.Add(1)
	close(c.release)
	c.release = make(chan struct{})
}

// wait adds st to (on) or removes it from the held requests waiting for a later request.
func (c *control) wait(st *holdState, on bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.waiting == nil {
		c.waiting = map[*holdState]bool{}
	}
	if on {
		c.waiting[st] = true
	} else {
		delete(c.waiting, st)
	}
	c.nwaiting.Store(int64(len(c.waiting)))
}

// forwardedUp numbers a request chunk forwarded to the server, and marks it as the first
// later request of the held requests that had none yet.
func (c *control) forwardedUp() {
	n := c.seq.Add(1)
	if c.nwaiting.Load() == 0 {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for st := range c.waiting {
		st.firstUp.CompareAndSwap(0, n)
	}
}

// holdRule holds the next n requests that match (nil: any).
type holdRule struct {
	n     int
	match func([]byte) bool
}

func (c *control) addHold(n int, match func([]byte) bool) {
	c.holdMu.Lock()
	defer c.holdMu.Unlock()
	c.holds = append(c.holds, &holdRule{n: n, match: match})
	c.nholds.Store(int64(len(c.holds)))
}

func (c *control) clearHolds() {
	c.holdMu.Lock()
	defer c.holdMu.Unlock()
	c.holds = nil
	c.nholds.Store(0)
}

// takeHold reports whether a rule holds the request chunk b, and counts that rule down.
func (c *control) takeHold(b []byte) bool {
	if c.nholds.Load() == 0 {
		return false
	}
	c.holdMu.Lock()
	defer c.holdMu.Unlock()
	for i, r := range c.holds {
		if r.match == nil || r.match(b) {
			if r.n--; r.n <= 0 {
				c.holds = append(c.holds[:i], c.holds[i+1:]...)
				c.nholds.Store(int64(len(c.holds)))
			}
			return true
		}
	}
	return false
}

// send passes c on. When the link's writer is gone (its connection broke) nothing reads
// the output: once the proxy closes, send gives up, drains the input until the link's
// reader closes it (Close closes every connection), closes the stub, and returns false,
// so that no goroutine of the link is left blocked.
func send(ctl *control, stub *toxics.ToxicStub, c *stream.StreamChunk) bool {
	select {
	case stub.Output <- c:
		return true
	case <-ctl.closing:
		for range stub.Input {
		}
		stub.Close()
		return false
	}
}

// chunkFate is what a toxic's pipe step decides for one chunk.
type chunkFate int

const (
	forwardChunk chunkFate = iota // pass it on
	skipChunk                     // it is not passed on (dropped, or held by the step)
	stopPipe                      // the Pipe returns: the step is done with the link
)

// pipe is the loop of every toxic here: it reads stub's chunks until the link is
// interrupted or its input closes (then it closes the stub), gives each to step, and
// passes it on (send) when step says so.
func pipe(ctl *control, stub *toxics.ToxicStub, step func(*stream.StreamChunk) chunkFate) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			switch step(c) {
			case stopPipe:
				return
			case forwardChunk:
				if !send(ctl, stub, c) {
					return
				}
			}
		}
	}
}

func take(n *atomic.Int64) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

func lookup(key string) *control {
	v, ok := controls.Load(key)
	if !ok {
		return nil
	}
	return v.(*control)
}

// holdToxic is on the request stream. When armed, it takes the next request chunk of a
// connection and holds it, with everything after it on that connection (a TCP stream
// keeps its order), until the client has closed the connection and a later request has
// gone up and been answered on another connection (the client's retry), or until
// Release or the proxy's MaxHold. Then it writes the held bytes to the server, keeps the
// server connection open until the server answers on it (a server may skip a request
// whose client is gone), and closes it.
type holdToxic struct {
	Control string `json:"control"`
}

// holdState is per connection; it outlives an interrupted Pipe.
type holdState struct {
	c           *conn
	held        []byte
	holding     bool
	since       time.Time
	epoch       int64
	relGen      int64 // control.relGen when the hold began
	inputClosed bool
	firstUp     atomic.Int64 // seq of the first request forwarded after the hold began
}

// NewState implements toxics.StatefulToxic.
func (t *holdToxic) NewState() any {
	st := &holdState{c: &conn{}}
	if ctl := lookup(t.Control); ctl != nil {
		ctl.pendMu.Lock()
		ctl.pending = append(ctl.pending, st.c)
		ctl.pendMu.Unlock()
	}
	return st
}

// Pipe implements toxics.Toxic.
func (t *holdToxic) Pipe(stub *toxics.ToxicStub) {
	ctl := lookup(t.Control)
	st, _ := stub.State.(*holdState)
	if ctl == nil || st == nil {
		new(toxics.NoopToxic).Pipe(stub)
		return
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	if st.holding && !t.holdOn(ctl, st, stub, tick) {
		return
	}
	pipe(ctl, stub, func(c *stream.StreamChunk) chunkFate {
		if !ctl.takeHold(c.Data) {
			ctl.forwardedUp()
			return forwardChunk
		}
		ctl.held.Add(1)
		st.holding, st.held, st.since, st.epoch = true, append([]byte(nil), c.Data...), time.Now(), ctl.epoch.Load()
		st.relGen = ctl.relGen.Load()
		ctl.wait(st, true)
		if !t.holdOn(ctl, st, stub, tick) {
			return stopPipe
		}
		return skipChunk
	})
}

// holdOn holds st's bytes until they are delivered (waitHeld) and reports whether the
// connection's stream goes on: false when interrupted (the state keeps the held bytes),
// settled (the stub is closed), or the proxy is closing.
func (t *holdToxic) holdOn(ctl *control, st *holdState, stub *toxics.ToxicStub, tick *time.Ticker) bool {
	return t.waitHeld(ctl, st, stub, tick) && !st.inputClosed && !st.holding
}

// waitHeld holds st's bytes until it is time to deliver them, then delivers them. It
// returns false when interrupted (still holding). After a delivery to a closed client it
// closes the stub.
func (t *holdToxic) waitHeld(ctl *control, st *holdState, stub *toxics.ToxicStub, tick *time.Ticker) bool {
	for st.holding {
		if ctl.relGen.Load() != st.relGen {
			t.deliver(ctl, st, stub)
			continue
		}
		var input <-chan *stream.StreamChunk
		if !st.inputClosed {
			input = stub.Input
		}
		select {
		case <-stub.Interrupt:
			return false
		case <-ctl.closing:
			t.settle(ctl, st, stub)
			return true
		case <-ctl.releaseCh():
			t.deliver(ctl, st, stub)
		case c := <-input:
			if c == nil {
				st.inputClosed = true
				ctl.abandoned.Add(1)
				continue
			}
			st.held = append(st.held, c.Data...)
		case <-tick.C:
			if time.Since(st.since) >= time.Duration(ctl.maxHold.Load()) {
				t.deliver(ctl, st, stub)
				continue
			}
			if up := st.firstUp.Load(); st.inputClosed && up > 0 && ctl.lastDown.Load() > up {
				t.deliver(ctl, st, stub)
			}
		}
	}
	return true
}

// deliver writes the held bytes to the server. When the client is still connected the
// stream goes on; when it is gone, deliver waits for the server's answer on this
// connection (or the proxy closing, or a minute) and closes the stub.
func (t *holdToxic) deliver(ctl *control, st *holdState, stub *toxics.ToxicStub) {
	st.holding = false
	ctl.wait(st, false)
	if ctl.epoch.Load() != st.epoch {
		// A reset closed this connection's server side: the bytes cannot arrive.
		t.settle(ctl, st, stub)
		return
	}
	before := st.c.replies.Load()
	// One chunk, so that the link's writer, if its connection broke, is not waited for
	// twice.
	if err := stub.WriteOutput(&stream.StreamChunk{Data: st.held, Timestamp: time.Now()}, 10*time.Second); err != nil {
		t.settle(ctl, st, stub)
		return
	}
	ctl.forwardedUp()
	st.held = nil
	if !st.inputClosed {
		ctl.early.Add(1)
		return
	}
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
wait:
	for st.c.replies.Load() == before && ctl.epoch.Load() == st.epoch {
		select {
		case <-ctl.closing:
			break wait
		case <-deadline.C:
			break wait
		case <-tick.C:
		}
	}
	ctl.late.Add(1)
	stub.Close()
}

// settle gives up a held request that is not delivered (the proxy closing, a reset).
func (t *holdToxic) settle(ctl *control, st *holdState, stub *toxics.ToxicStub) {
	st.holding, st.held = false, nil
	ctl.wait(st, false)
	ctl.lost.Add(1)
	if st.inputClosed || ctl.epoch.Load() != st.epoch {
		stub.Close()
		st.inputClosed = true
	}
}

// dropToxic is on the reply stream. When armed, it drops the next reply chunk of a
// connection and every later one on that connection (its stream is broken from there):
// the server did what was asked, and the client waits until it times out.
type dropToxic struct {
	Control string `json:"control"`
}

type dropState struct {
	c        *conn
	dropping bool
}

// NewState implements toxics.StatefulToxic.
func (t *dropToxic) NewState() any {
	st := &dropState{}
	if ctl := lookup(t.Control); ctl != nil {
		ctl.pendMu.Lock()
		if len(ctl.pending) > 0 {
			st.c, ctl.pending = ctl.pending[0], ctl.pending[1:]
		}
		ctl.pendMu.Unlock()
	}
	if st.c == nil {
		st.c = &conn{}
	}
	return st
}

// Pipe implements toxics.Toxic.
func (t *dropToxic) Pipe(stub *toxics.ToxicStub) {
	ctl := lookup(t.Control)
	st, _ := stub.State.(*dropState)
	if ctl == nil || st == nil {
		new(toxics.NoopToxic).Pipe(stub)
		return
	}
	pipe(ctl, stub, func(*stream.StreamChunk) chunkFate {
		st.c.replies.Add(1)
		if !st.dropping && take(&ctl.dropArmed) {
			st.dropping = true
			ctl.dropped.Add(1)
		}
		if st.dropping {
			return skipChunk
		}
		ctl.lastDown.Store(ctl.seq.Add(1))
		return forwardChunk
	})
}

// delayToxic delays every chunk by the control's latency plus or minus its jitter, in
// order. It is toxiproxy's latency toxic with settings read from the control: changing
// the built-in's settings on a running proxy (UpdateToxicJson) decodes them into the
// toxic value that every connection's goroutine reads without a lock, a data race that
// -race reports; adding and removing it interrupts its neighbours in the chain.
type delayToxic struct {
	Control string `json:"control"`
}

// GetBufferSize implements toxics.BufferedToxic, as the built-in latency toxic does.
func (t *delayToxic) GetBufferSize() int { return 1024 }

// Pipe implements toxics.Toxic.
func (t *delayToxic) Pipe(stub *toxics.ToxicStub) {
	ctl := lookup(t.Control)
	if ctl == nil {
		new(toxics.NoopToxic).Pipe(stub)
		return
	}
	pipe(ctl, stub, func(c *stream.StreamChunk) chunkFate {
		d := time.Duration(ctl.latency.Load())
		if j := ctl.jitter.Load(); j > 0 {
			d += time.Duration(rand.Int64N(2*j) - j)
		}
		if wait := d - time.Since(c.Timestamp); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ctl.closing:
				timer.Stop()
			}
		}
		return forwardChunk
	})
}
