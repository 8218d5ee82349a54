package hbaserpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// Service names sent in the connection header.
const (
	serviceClient = "ClientService"
	serviceMaster = "MasterService"
)

// maxFrame bounds a response frame, as a guard against a corrupt length.
const maxFrame = 256 << 20

// connPreamble is "HBas", RPC version 0, auth method SIMPLE (0x50).
var connPreamble = []byte{'H', 'B', 'a', 's', 0, 0x50}

// errConnClosed is the cause of calls failed because the client closed.
var errConnClosed = errors.New("connection closed")

// maxTimeouts is how many calls in a row may time out on one connection, with no
// frame read between them, before the connection is deemed dead and closed. A
// timeout while nothing at all was read since the call was queued closes it at
// once (see rpcConn.timedOut).
const maxTimeouts = 3

// writeQueueLen is the capacity of a connection's queue of frames to write; callers
// wait (bounded by their context and timeout) when it is full.
const writeQueueLen = 256

// maxWriteBatch bounds the bytes the writer gathers into one write.
const maxWriteBatch = 256 << 10

// rpcConn is one TCP connection to one HBase server for one service. It is shared
// by all goroutines: requests are pipelined, tagged with call ids, and written by
// one writer goroutine, in the order they were queued; a reader goroutine hands
// each response to its waiting caller.
//
// A caller that gives up (its context ends, or its timeout fires) before the writer
// has taken its frame withdraws it: the request is never sent. Once the writer has
// taken a frame, it writes it whole whatever the caller does (a frame cut short
// would corrupt the stream for every other call): the caller then only stops
// waiting for the reply, and a late reply is discarded.
type rpcConn struct {
	addr    string
	service string
	nc      net.Conn
	log     *slog.Logger
	// writeTimeout bounds one write on the wire: a server that does not read for
	// that long is dead, and the connection is closed.
	writeTimeout time.Duration
	// dropResponse, when set (tests only), makes the reader discard the response to
	// a matching method and break the connection, as if the reply were lost.
	dropResponse func(method string) bool
	// sasl is set when the connection was authenticated with SASL (Kerberos).
	sasl bool

	queue chan *pendingCall // frames for the writer
	reads atomic.Uint64     // frames read so far

	mu       sync.Mutex
	calls    map[uint32]*pendingCall
	nextID   uint32
	timeouts int   // calls timed out since the last frame was read
	err      error // set once the connection is dead
	done     chan struct{}
	wg       sync.WaitGroup // the reader and the writer
}

// States of a pending call's frame.
const (
	frameQueued    int32 = iota // waiting for the writer
	frameWriting                // taken by the writer: it will be written whole
	frameWithdrawn              // given up before the writer took it: never sent
)

type pendingCall struct {
	method string
	frame  []byte          // set before the call is queued; read by the writer only
	state  atomic.Int32    // frameQueued, frameWriting or frameWithdrawn
	ch     chan callResult // buffered, capacity 1
}

// withdraw marks the call's frame as not to be written, and reports whether that
// happened in time: false when the writer has already taken it (the request is,
// or is being, sent).
func (pc *pendingCall) withdraw() bool {
	return pc.state.CompareAndSwap(frameQueued, frameWithdrawn)
}

type callResult struct {
	body []byte // the delimited response message, undecoded
	err  error
}

// dialConn connects to addr with cfg.Dial, sends the preamble and connection header
// and starts the reader and writer goroutines. ctx bounds the connection attempt.
func dialConn(ctx context.Context, cfg Config, addr, service string, dropResponse func(string) bool) (*rpcConn, error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	nc, err := cfg.Dial(dctx, "tcp", addr)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &connError{err: fmt.Errorf("dial %s: %w", addr, err)}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	deadline := time.Now().Add(cfg.DialTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	nc, user, err := secureConn(ctx, cfg, nc, addr, deadline)
	if err != nil {
		return nil, err
	}
	hdr := &pb.ConnectionHeader{
		UserInfo:    &pb.UserInformation{EffectiveUser: proto.String(user)},
		ServiceName: proto.String(service),
		VersionInfo: &pb.VersionInfo{
			Version:      proto.String("2.6.0"),
			Url:          proto.String("dcsync"),
			Revision:     proto.String("dcsync"),
			User:         proto.String(user),
			Date:         proto.String("2025"),
			SrcChecksum:  proto.String("dcsync"),
			VersionMajor: proto.Uint32(2),
			VersionMinor: proto.Uint32(6),
		},
	}
	hb, err := proto.Marshal(hdr)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("marshal connection header: %w", err)
	}
	buf := make([]byte, 0, len(connPreamble)+4+len(hb))
	if cfg.krb == nil {
		buf = append(buf, connPreamble...) // else sent before the SASL exchange
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(hb)))
	buf = append(buf, hb...)
	_ = nc.SetWriteDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetWriteDeadline(time.Unix(1, 0)) })
	_, err = nc.Write(buf)
	stop()
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &connError{err: fmt.Errorf("handshake with %s: %w", addr, err)}
	}
	c := &rpcConn{
		addr:         addr,
		service:      service,
		nc:           nc,
		log:          cfg.Logger,
		writeTimeout: cfg.RPCTimeout,
		dropResponse: dropResponse,
		sasl:         cfg.krb != nil,
		queue:        make(chan *pendingCall, writeQueueLen),
		calls:        make(map[uint32]*pendingCall),
		done:         make(chan struct{}),
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	c.log.Debug("hbase: connected", "addr", addr, "service", service)
	return c, nil
}

// alive reports whether the connection can take new calls.
func (c *rpcConn) alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil
}

// close breaks the connection (if not already broken), failing all pending calls
// with err, and waits for the reader and writer goroutines to exit.
func (c *rpcConn) close(err error) {
	c.fail(err)
	c.wg.Wait()
}

// fail marks the connection dead and fails every pending call: those whose frame
// the writer had taken are in doubt, the others were not sent. Safe to call from
// the reader and writer goroutines.
func (c *rpcConn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	calls := c.calls
	c.calls = nil
	close(c.done)
	c.mu.Unlock()
	_ = c.nc.Close()
	for _, pc := range calls {
		sent := !pc.withdraw()
		pc.ch <- callResult{err: c.callError(sent, pc.method, err)}
	}
	if !errors.Is(err, errConnClosed) {
		c.log.Debug("hbase: connection broken", "addr", c.addr, "service", c.service, "err", err)
	}
}

// callError is the error of a call failed because the connection died of err: a
// transport failure (retried), unless the server refused the client's credentials.
func (c *rpcConn) callError(sent bool, method string, err error) error {
	if isUnauthenticated(err) {
		return err
	}
	return &connError{sent: sent, err: fmt.Errorf("%s %s: %w", c.addr, method, err)}
}

func isUnauthenticated(err error) bool {
	return errors.Is(err, dcsync.ErrUnauthenticated)
}

// call sends one request and waits for its response, which it unmarshals into resp.
// timeout bounds the whole call (queueing, writing and waiting) when ctx allows
// longer.
func (c *rpcConn) call(ctx context.Context, method string, req, resp proto.Message, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	param, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("marshal %s request: %w", method, err)
	}
	timeoutMs := uint32(timeout / time.Millisecond)
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < timeout {
			timeoutMs = uint32(max(d, time.Millisecond) / time.Millisecond)
		}
	}

	pc := &pendingCall{method: method, ch: make(chan callResult, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		if isUnauthenticated(err) {
			return err
		}
		return &connError{err: fmt.Errorf("%s: %w", c.addr, err)}
	}
	c.nextID++
	if c.nextID > math.MaxInt32 {
		c.nextID = 1
	}
	id := c.nextID
	c.calls[id] = pc
	c.mu.Unlock()
	pc.frame = encodeRequest(id, method, param, timeoutMs)
	readsBefore := c.reads.Load()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case c.queue <- pc:
	case r := <-pc.ch: // the connection broke: not sent
		return r.err
	case <-ctx.Done():
		c.forget(id)
		return ctx.Err()
	case <-timer.C:
		c.forget(id)
		return c.timedOut(method, readsBefore, false)
	}

	select {
	case r := <-pc.ch:
		if r.err != nil {
			return r.err
		}
		if err := proto.Unmarshal(r.body, resp); err != nil {
			return fmt.Errorf("%s %s: bad response: %w", c.addr, method, err)
		}
		return nil
	case <-ctx.Done():
		// Withdrawn in time, the request is never sent; otherwise it is written
		// whole and its late reply discarded.
		c.forget(id)
		pc.withdraw()
		return ctx.Err()
	case <-timer.C:
		c.forget(id)
		return c.timedOut(method, readsBefore, !pc.withdraw())
	}
}

// timedOut records a call's timeout and returns its error. The connection is
// deemed dead, and closed (failing its other calls), when nothing at all was read
// on it since the call was queued (a server that accepts but never answers, with
// no RST to tell), or after maxTimeouts timeouts with no frame read in between.
// The error then says so (timeoutError.closed), for the caller to drop the
// server's region locations.
func (c *rpcConn) timedOut(method string, readsBefore uint64, sent bool) error {
	c.mu.Lock()
	c.timeouts++
	n := c.timeouts
	c.mu.Unlock()
	te := &timeoutError{method: method}
	if c.reads.Load() == readsBefore || n >= maxTimeouts {
		te.closed = true
		c.fail(fmt.Errorf("server silent: %d call(s) timed out with no reply", n))
	}
	if !sent {
		return &connError{err: fmt.Errorf("%s %s: not sent: %w", c.addr, method, te)}
	}
	return te
}

func (c *rpcConn) forget(id uint32) {
	c.mu.Lock()
	if c.calls != nil {
		delete(c.calls, id)
	}
	c.mu.Unlock()
}

// writeLoop writes the queued frames in order, gathering those already queued into
// one write, and skipping frames withdrawn by their callers. A write that fails or
// stalls past writeTimeout breaks the connection.
func (c *rpcConn) writeLoop() {
	defer c.wg.Done()
	var buf []byte
	for {
		var pc *pendingCall
		select {
		case pc = <-c.queue:
		case <-c.done:
			return
		}
		buf = buf[:0]
	gather:
		for {
			if pc.state.CompareAndSwap(frameQueued, frameWriting) {
				buf = append(buf, pc.frame...)
			}
			pc.frame = nil
			if len(buf) >= maxWriteBatch {
				break
			}
			select {
			case pc = <-c.queue:
			default:
				break gather
			}
		}
		if len(buf) == 0 {
			continue
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
		if _, err := c.nc.Write(buf); err != nil {
			c.fail(fmt.Errorf("write: %w", err))
			return
		}
		if cap(buf) > maxWriteBatch {
			buf = nil // do not keep a large buffer for the connection's life
		}
	}
}

// encodeRequest builds a request frame: total length, delimited RequestHeader,
// delimited parameter.
func encodeRequest(id uint32, method string, param []byte, timeoutMs uint32) []byte {
	hdr := &pb.RequestHeader{
		CallId:       proto.Uint32(id),
		MethodName:   proto.String(method),
		RequestParam: proto.Bool(true),
	}
	if timeoutMs > 0 {
		hdr.Timeout = proto.Uint32(timeoutMs)
	}
	hb, _ := proto.Marshal(hdr) // cannot fail: all required fields are set
	total := protowire.SizeBytes(len(hb)) + protowire.SizeBytes(len(param))
	buf := make([]byte, 0, 4+total)
	buf = binary.BigEndian.AppendUint32(buf, uint32(total))
	buf = protowire.AppendBytes(buf, hb)
	buf = protowire.AppendBytes(buf, param)
	return buf
}

// decodeResponse splits a response frame (without its length prefix) into the
// header and the delimited response message that follows it.
func decodeResponse(frame []byte) (*pb.ResponseHeader, []byte, error) {
	hb, n := protowire.ConsumeBytes(frame)
	if n < 0 {
		return nil, nil, fmt.Errorf("bad response header length: %w", protowire.ParseError(n))
	}
	hdr := &pb.ResponseHeader{}
	if err := proto.Unmarshal(hb, hdr); err != nil {
		return nil, nil, fmt.Errorf("bad response header: %w", err)
	}
	rest := frame[n:]
	if hdr.GetException() != nil || len(rest) == 0 {
		return hdr, nil, nil
	}
	body, m := protowire.ConsumeBytes(rest)
	if m < 0 {
		return nil, nil, fmt.Errorf("bad response body length: %w", protowire.ParseError(m))
	}
	return hdr, body, nil
}

func (c *rpcConn) readLoop() {
	defer c.wg.Done()
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var lenBuf [4]byte
	for {
		if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		n := binary.BigEndian.Uint32(lenBuf[:])
		if c.sasl && c.reads.Load() == 0 && n == saslStatusError {
			// Not a frame: the server's late refusal of the SASL exchange (status
			// ERROR, then a Java exception's class and message), which has no
			// success reply to wait for (HBase's client reads none either).
			c.fail(driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s refused the Kerberos authentication: %s", c.addr, saslRefusal(r)))
			return
		}
		if n > maxFrame {
			c.fail(fmt.Errorf("response frame of %d bytes exceeds the limit", n))
			return
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(r, frame); err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		hdr, body, err := decodeResponse(frame)
		if err != nil {
			c.fail(err)
			return
		}
		id := hdr.GetCallId()
		c.reads.Add(1)
		c.mu.Lock()
		c.timeouts = 0
		pc := c.calls[id]
		if pc != nil {
			delete(c.calls, id)
		}
		c.mu.Unlock()
		if pc == nil {
			if ex := hdr.GetException(); ex != nil && (id == 0 || id > math.MaxInt32) {
				// A connection-level error (call id -1): the server is closing on us.
				re := remoteError(ex)
				if re.Class == classAccessDenied {
					// A secure server refusing a client without credentials
					// ("Authentication is required"): final, not a broken link.
					c.fail(driver.Errorf(dcsync.Unauthenticated, "hbase", "%s refused the connection: %s (does the cluster use Kerberos? then give the client a principal and keytab)", c.addr, re.Message))
					return
				}
				c.fail(re)
				return
			}
			continue // a late response to a cancelled call
		}
		if c.dropResponse != nil && c.dropResponse(pc.method) {
			pc.ch <- callResult{err: &connError{sent: true, err: fmt.Errorf("%s %s: response dropped (test)", c.addr, pc.method)}}
			c.fail(errors.New("response dropped (test)"))
			return
		}
		if ex := hdr.GetException(); ex != nil {
			pc.ch <- callResult{err: remoteError(ex)}
			continue
		}
		if hdr.GetCellBlockMeta().GetLength() > 0 {
			pc.ch <- callResult{err: errors.New("unexpected cell block in response (no codec was negotiated)")}
			continue
		}
		pc.ch <- callResult{body: body}
	}
}

func remoteError(ex *pb.ExceptionResponse) *RemoteError {
	class := ex.GetExceptionClassName()
	return &RemoteError{
		Class:      class,
		Message:    firstLineMessage(class, ex.GetStackTrace()),
		DoNotRetry: ex.GetDoNotRetry(),
	}
}
