package aerospike_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy sits between a client and the real server and injects the faults a real
// server does not make on demand: a reply dropped after the server applied the command
// (the client times out, in doubt), connections broken, the server "restarting" (the
// port closed for a moment). It forwards bytes unchanged and reads just enough of the
// wire protocol to classify each command. The Go client sends one command at a time on
// a connection, so every reply frame until the next request belongs to the last request.
//
// The client must reach the server only through the proxy: it does on loopback, where
// the client does not look for a load balancer, and with a one-node cluster, whose peer
// list is empty.
type faultProxy struct {
	target string

	mu     sync.Mutex
	ln     net.Listener
	port   int
	conns  map[net.Conn]struct{}
	drops  []*dropRule
	busy   []*dropRule
	holds  []*dropRule
	held   [][]byte // requests held back, in arrival order
	closed bool
	wg     sync.WaitGroup

	stConns, stInfo, stReads, stWrites, stDeletes, stBatches, stDropped, stBusy atomic.Int64
}

// command is what the proxy knows of a request.
type command struct {
	Kind  string // "info", "read", "write", "delete", "batch"
	Set   string
	Write bool
	// Ops lists the ops' types (1 read, 2 write, 3 cdt read, 4 cdt modify, 5 incr,
	// 7 exp read, 8 exp modify, 11 touch, 14 delete) and Bins their bin names.
	Ops  []byte
	Bins []string
}

type dropRule struct {
	remaining int
	code      byte // the result code a refusing rule answers
	match     func(command) bool
}

// proxyStats counts what went through the proxy.
type proxyStats struct {
	Connections, Info, Reads, Writes, Deletes, Batches, Dropped, Busy int64
}

// startProxy starts a proxy to the real server, closed when the test ends.
func startProxy(t testing.TB) *faultProxy {
	t.Helper()
	p := &faultProxy{target: realServer(t), conns: map[net.Conn]struct{}{}}
	if err := p.listen(0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func (p *faultProxy) listen(port int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return errors.New("proxy closed")
	}
	p.ln, p.port = ln, ln.Addr().(*net.TCPAddr).Port
	p.wg.Add(1)
	p.mu.Unlock()
	go p.accept(ln)
	return nil
}

// Addr is the proxy's host:port.
func (p *faultProxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("127.0.0.1:%d", p.port)
}

func (p *faultProxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		p.stConns.Add(1)
		pc := &proxyConn{client: c}
		go p.requests(pc, s)
		go p.replies(s, pc)
	}
}

func (p *faultProxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

// proxyConn is the client side of one proxied connection.
type proxyConn struct {
	client   net.Conn
	dropping atomic.Bool // the current request's reply is dropped
	wmu      sync.Mutex  // serialises writes to client
}

func (pc *proxyConn) write(b []byte) error {
	pc.wmu.Lock()
	defer pc.wmu.Unlock()
	_, err := pc.client.Write(b)
	return err
}

// requests forwards client frames to the server, deciding for each whether its reply
// is dropped, or whether the proxy answers KEY_BUSY itself.
func (p *faultProxy) requests(pc *proxyConn, s net.Conn) {
	defer p.wg.Done()
	defer p.forget(pc.client, s)
	r := bufio.NewReader(pc.client)
	for {
		frame, err := readFrame(r)
		if err != nil {
			return
		}
		cmd := parseCommand(frame)
		p.count(cmd)
		if d := p.matchRule(&p.busy, cmd); d != nil {
			// Not forwarded: nothing is applied, as when the server refuses a write to
			// a record with too many writes queued (or a batch with too many records).
			p.stBusy.Add(1)
			if err := pc.write(errorReply(d.code)); err != nil {
				return
			}
			continue
		}
		if p.match(&p.holds, cmd) {
			// Not forwarded now: the client times out (in doubt) and retries; Deliver
			// sends it later, after the requests that followed it.
			p.mu.Lock()
			p.held = append(p.held, frame)
			p.mu.Unlock()
			continue
		}
		drop := p.match(&p.drops, cmd)
		if drop {
			p.stDropped.Add(1)
		}
		pc.dropping.Store(drop)
		if _, err := s.Write(frame); err != nil {
			return
		}
	}
}

// replies forwards server frames to the client unless the request they answer is
// being dropped.
func (p *faultProxy) replies(s net.Conn, pc *proxyConn) {
	defer p.wg.Done()
	defer p.forget(pc.client, s)
	r := bufio.NewReader(s)
	for {
		frame, err := readFrame(r)
		if err != nil {
			return
		}
		if pc.dropping.Load() {
			continue
		}
		if err := pc.write(frame); err != nil {
			return
		}
	}
}

// errorReply is an AS_MSG reply with result code code and nothing else: an 8-byte
// proto header (version 2, type 3, size 22), then the 22-byte message header (header
// size 22, info3 LAST, the result code).
func errorReply(code byte) []byte {
	b := make([]byte, 8+msgHeaderLen)
	binary.BigEndian.PutUint64(b, 2<<56|protoMessage<<48|msgHeaderLen)
	b[8], b[8+3], b[8+5] = msgHeaderLen, 1, code
	return b
}

func (p *faultProxy) count(cmd command) {
	switch cmd.Kind {
	case "info":
		p.stInfo.Add(1)
	case "read":
		p.stReads.Add(1)
	case "write":
		p.stWrites.Add(1)
	case "delete":
		p.stDeletes.Add(1)
	case "batch":
		p.stBatches.Add(1)
	}
}

// match reports whether a rule of rules matches cmd, and counts that rule down.
func (p *faultProxy) match(rules *[]*dropRule, cmd command) bool {
	return p.matchRule(rules, cmd) != nil
}

// matchRule returns the rule of rules that matches cmd (nil: none), counted down.
func (p *faultProxy) matchRule(rules *[]*dropRule, cmd command) *dropRule {
	if cmd.Kind == "info" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, d := range *rules {
		if d.match(cmd) {
			d.remaining--
			if d.remaining == 0 {
				*rules = append((*rules)[:i], (*rules)[i+1:]...)
			}
			return d
		}
	}
	return nil
}

// DropResponses makes the proxy forward, but not answer, the next n commands for which
// match is true (nil: every command that writes). The server applies them; the client
// times out, in doubt. Rules accumulate.
func (p *faultProxy) DropResponses(n int, match func(command) bool) {
	if match == nil {
		match = func(c command) bool { return c.Write }
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops = append(p.drops, &dropRule{remaining: n, match: match})
}

// BusyResponses makes the proxy answer the next n commands for which match is true
// with KEY_BUSY itself, without forwarding them: what the server answers when too many
// writes are queued on one record. Rules accumulate.
func (p *faultProxy) BusyResponses(n int, match func(command) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy = append(p.busy, &dropRule{remaining: n, match: match, code: 14})
}

// RefuseResponses makes the proxy answer the next n commands for which match is true
// with result code code itself, without forwarding them (nothing is applied). Rules
// accumulate with BusyResponses'.
func (p *faultProxy) RefuseResponses(n int, code byte, match func(command) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy = append(p.busy, &dropRule{remaining: n, match: match, code: code})
}

// HoldRequests makes the proxy hold back the next n commands for which match is true:
// they are not forwarded (the client times out, in doubt, and retries) until Deliver
// sends them, after whatever the client sent meanwhile. Rules accumulate.
func (p *faultProxy) HoldRequests(n int, match func(command) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holds = append(p.holds, &dropRule{remaining: n, match: match})
}

// Held returns the number of requests held back and not yet delivered.
func (p *faultProxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// Deliver sends every held request to the server, in the order they were held, on a
// connection of its own (the client's has closed on its timeout), waits for each reply
// and returns their result codes. The server times a command from its arrival, so a
// late request is executed as if just sent.
func (p *faultProxy) Deliver() ([]int, error) {
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mu.Unlock()
	if len(held) == 0 {
		return nil, nil
	}
	c, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	var codes []int
	for _, frame := range held {
		if _, err := c.Write(frame); err != nil {
			return codes, err
		}
		if parseCommand(frame).Kind == "batch" {
			// A batch is answered by a stream of frames ending with a message marked
			// last: read it all, so that the batch has run whole before the next
			// request (or the close) goes out.
			code, err := readBatchReply(r)
			if err != nil {
				return codes, err
			}
			codes = append(codes, code)
			continue
		}
		reply, err := readFrame(r)
		if err != nil {
			return codes, err
		}
		if len(reply) < 8+msgHeaderLen {
			return codes, fmt.Errorf("reply of %d bytes", len(reply))
		}
		codes = append(codes, int(reply[8+5]))
	}
	return codes, nil
}

// readBatchReply reads the frames of a batch's reply up to its message marked last
// (info3 LAST) and returns that message's result code.
func readBatchReply(r *bufio.Reader) (int, error) {
	const info3Last = 1
	for {
		reply, err := readFrame(r)
		if err != nil {
			return 0, err
		}
		b := reply[8:]
		for len(b) > 0 {
			if len(b) < msgHeaderLen {
				return 0, fmt.Errorf("batch reply message of %d bytes", len(b))
			}
			if b[3]&info3Last != 0 {
				return int(b[5]), nil
			}
			nFields := int(binary.BigEndian.Uint16(b[18:20]))
			nOps := int(binary.BigEndian.Uint16(b[20:22]))
			pos := int(b[0]) // the header's size
			for i := 0; i < nFields+nOps; i++ {
				if pos+4 > len(b) {
					return 0, fmt.Errorf("batch reply message truncated")
				}
				pos += 4 + int(binary.BigEndian.Uint32(b[pos:]))
			}
			if pos > len(b) {
				return 0, fmt.Errorf("batch reply message truncated")
			}
			b = b[pos:]
		}
	}
}

// ClearDrops forgets every drop, busy and hold rule still pending.
func (p *faultProxy) ClearDrops() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops, p.busy, p.holds = nil, nil, nil
}

// dropOrReset is a chaos fault (chaos.Scenario.Fault): one time in four it closes every
// connection, else it drops the next one or two replies.
func (p *faultProxy) dropOrReset(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		p.CloseConnections()
		return "connections-reset"
	}
	p.DropResponses(1+r.IntN(2), nil)
	return "dropped-reply"
}

// CloseConnections breaks every open connection; the proxy keeps listening.
func (p *faultProxy) CloseConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Restart closes the port and every connection, as a server restart does, then
// listens on the same port again.
func (p *faultProxy) Restart() error {
	p.mu.Lock()
	ln, port := p.ln, p.port
	p.mu.Unlock()
	ln.Close()
	p.CloseConnections()
	time.Sleep(50 * time.Millisecond)
	var err error
	for i := 0; i < 50; i++ {
		if err = p.listen(port); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// Close stops the proxy and waits for its goroutines.
func (p *faultProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Stats returns the proxy's counters.
func (p *faultProxy) Stats() proxyStats {
	return proxyStats{
		Connections: p.stConns.Load(), Info: p.stInfo.Load(), Reads: p.stReads.Load(),
		Writes: p.stWrites.Load(), Deletes: p.stDeletes.Load(), Batches: p.stBatches.Load(),
		Dropped: p.stDropped.Load(), Busy: p.stBusy.Load(),
	}
}

// readFrame reads one protocol frame: an 8-byte header (version, type, 48-bit size)
// and its body.
func readFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint64(hdr[:]) & (1<<48 - 1)
	if size > 128<<20 {
		return nil, fmt.Errorf("frame of %d bytes", size)
	}
	frame := make([]byte, 8+size)
	copy(frame, hdr[:])
	if _, err := io.ReadFull(r, frame[8:]); err != nil {
		return nil, err
	}
	return frame, nil
}

// Protocol constants (the Aerospike wire protocol, as the client sends it).
const (
	protoInfo    = 1
	protoMessage = 3
	info1Batch   = 1 << 3
	info2Write   = 1 << 0
	info2Delete  = 1 << 1
	fieldSet     = 1
	fieldBatch   = 41
	fieldBatch2  = 42
	msgHeaderLen = 22
)

// parseCommand classifies a request frame. A frame it cannot read is a "read".
func parseCommand(frame []byte) command {
	if frame[1] == protoInfo {
		return command{Kind: "info"}
	}
	cmd := command{Kind: "read"}
	b := frame[8:]
	if frame[1] != protoMessage || len(b) < msgHeaderLen {
		return cmd
	}
	info1, info2 := b[1], b[2]
	nFields := int(binary.BigEndian.Uint16(b[18:20]))
	nOps := int(binary.BigEndian.Uint16(b[20:22]))
	cmd.Write = info2&info2Write != 0
	switch {
	case info1&info1Batch != 0:
		cmd.Kind = "batch"
	case info2&info2Delete != 0:
		cmd.Kind = "delete"
	case cmd.Write:
		cmd.Kind = "write"
	}
	pos := msgHeaderLen
	for i := 0; i < nFields && pos+5 <= len(b); i++ {
		size := int(binary.BigEndian.Uint32(b[pos:]))
		typ := b[pos+4]
		end := pos + 4 + size
		if size < 1 || end > len(b) {
			return cmd
		}
		switch typ {
		case fieldSet:
			cmd.Set = string(b[pos+5 : end])
		case fieldBatch, fieldBatch2:
			cmd.Kind = "batch"
		}
		pos = end
	}
	for i := 0; i < nOps && pos+8 <= len(b); i++ {
		size := int(binary.BigEndian.Uint32(b[pos:]))
		end := pos + 4 + size
		if size < 4 || end > len(b) {
			return cmd
		}
		cmd.Ops = append(cmd.Ops, b[pos+4])
		nameLen := int(b[pos+7])
		if pos+8+nameLen <= end {
			cmd.Bins = append(cmd.Bins, string(b[pos+8:pos+8+nameLen]))
		}
		pos = end
	}
	return cmd
}

// writesTo matches single-record writes to set.
func writesTo(set string) func(command) bool {
	return func(c command) bool { return c.Kind == "write" && c.Set == set }
}
