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
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

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

// rpcConn is one TCP connection to one HBase server for one service. It is shared
// by all goroutines: requests are pipelined, tagged with call ids, and a reader
// goroutine hands each response to its waiting caller.
type rpcConn struct {
	addr    string
	service string
	nc      net.Conn
	log     *slog.Logger
	// dropResponse, when set (tests only), makes the reader discard the response to
	// a matching method and break the connection, as if the reply were lost.
	dropResponse func(method string) bool

	writeMu sync.Mutex // serialises frames on the wire

	mu     sync.Mutex
	calls  map[uint32]*pendingCall
	nextID uint32
	err    error // set once the connection is dead
	done   chan struct{}
	readWG sync.WaitGroup
}

type pendingCall struct {
	method string
	ch     chan callResult // buffered, capacity 1
}

type callResult struct {
	body []byte // the delimited response message, undecoded
	err  error
}

// dialConn connects to addr, sends the preamble and connection header and starts the
// reader goroutine.
func dialConn(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), addr, service, user string, timeout time.Duration, log *slog.Logger) (*rpcConn, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	nc, err := dial(dctx, "tcp", addr)
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
	buf = append(buf, connPreamble...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(hb)))
	buf = append(buf, hb...)
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = nc.SetWriteDeadline(deadline)
	if _, err := nc.Write(buf); err != nil {
		nc.Close()
		return nil, &connError{err: fmt.Errorf("handshake with %s: %w", addr, err)}
	}
	c := &rpcConn{
		addr:    addr,
		service: service,
		nc:      nc,
		log:     log,
		calls:   make(map[uint32]*pendingCall),
		done:    make(chan struct{}),
	}
	c.readWG.Add(1)
	go c.readLoop()
	log.Debug("hbase: connected", "addr", addr, "service", service)
	return c, nil
}

// alive reports whether the connection can take new calls.
func (c *rpcConn) alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil
}

// close breaks the connection (if not already broken), failing all pending calls
// with err, and waits for the reader goroutine to exit.
func (c *rpcConn) close(err error) {
	c.fail(err)
	c.readWG.Wait()
}

// fail marks the connection dead and fails every pending call. Safe to call from the
// reader goroutine.
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
		// The request was (possibly) written: its outcome is unknown.
		pc.ch <- callResult{err: &connError{sent: true, err: fmt.Errorf("%s %s: %w", c.addr, pc.method, err)}}
	}
	if !errors.Is(err, errConnClosed) {
		c.log.Debug("hbase: connection broken", "addr", c.addr, "service", c.service, "err", err)
	}
}

// call sends one request and waits for its response, which it unmarshals into resp.
// timeout bounds the wait when ctx allows longer.
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
		return &connError{err: fmt.Errorf("%s: %w", c.addr, err)}
	}
	c.nextID++
	if c.nextID > math.MaxInt32 {
		c.nextID = 1
	}
	id := c.nextID
	c.calls[id] = pc
	c.mu.Unlock()

	frame := encodeRequest(id, method, param, timeoutMs)
	if err := c.write(ctx, frame, timeout); err != nil {
		// A frame that was not fully written cannot be parsed by the server, so the
		// request was not applied; the stream is corrupt, so the connection goes.
		c.fail(fmt.Errorf("write: %w", err))
		c.forget(id)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &connError{err: fmt.Errorf("%s %s: write: %w", c.addr, method, err)}
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
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
		c.forget(id) // a late response will be discarded
		return ctx.Err()
	case <-timer.C:
		c.forget(id)
		return &timeoutError{method: method}
	}
}

func (c *rpcConn) forget(id uint32) {
	c.mu.Lock()
	if c.calls != nil {
		delete(c.calls, id)
	}
	c.mu.Unlock()
}

// write sends one frame, bounded by ctx and timeout. A cancelled ctx interrupts a
// blocked write (which then breaks the connection).
func (c *rpcConn) write(ctx context.Context, frame []byte, timeout time.Duration) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.nc.SetWriteDeadline(deadline)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		_ = c.nc.SetWriteDeadline(time.Unix(1, 0))
	})
	_, err := c.nc.Write(frame)
	if !stop() {
		<-fired // the interrupt ran (or is running): let it finish before the next writer
	}
	return err
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
	defer c.readWG.Done()
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var lenBuf [4]byte
	for {
		if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		n := binary.BigEndian.Uint32(lenBuf[:])
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
		c.mu.Lock()
		pc := c.calls[id]
		if pc != nil {
			delete(c.calls, id)
		}
		c.mu.Unlock()
		if pc == nil {
			if ex := hdr.GetException(); ex != nil && (id == 0 || id > math.MaxInt32) {
				// A connection-level error (call id -1): the server is closing on us.
				c.fail(remoteError(ex))
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
