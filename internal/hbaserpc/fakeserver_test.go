package hbaserpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// fakeRequest is one request as the fake server decoded it.
type fakeRequest struct {
	header *pb.RequestHeader
	param  []byte
	conn   *fakeConn
}

// fakeReply says how the fake server answers a request.
type fakeReply struct {
	resp  proto.Message
	exc   *pb.ExceptionResponse
	delay time.Duration // answer after this long (asynchronously)
	drop  bool          // never answer
	close bool          // close the connection instead of answering
}

// fakeServer speaks just enough of the HBase RPC protocol to test the client.
type fakeServer struct {
	t       *testing.T
	ln      net.Listener
	handler func(req fakeRequest) fakeReply

	mu       sync.Mutex
	conns    []*fakeConn
	headers  []*pb.ConnectionHeader
	accepted int
	ended    int // connections that ended by a read error (the client closed them)
	wg       sync.WaitGroup
}

type fakeConn struct {
	nc      net.Conn
	writeMu sync.Mutex
}

func newFakeServer(t *testing.T, handler func(req fakeRequest) fakeReply) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{t: t, ln: ln, handler: handler}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

func (s *fakeServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// closeConns breaks every open connection (as a server crash would).
func (s *fakeServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.nc.Close()
	}
}

func (s *fakeServer) acceptedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// endedCount is how many connections ended because the client closed them (or the
// server's closeConns did).
func (s *fakeServer) endedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

func (s *fakeServer) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		c := &fakeConn{nc: nc}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.accepted++
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *fakeServer) serve(c *fakeConn) {
	defer s.wg.Done()
	defer c.nc.Close()
	r := bufio.NewReader(c.nc)
	pre := make([]byte, 6)
	if _, err := io.ReadFull(r, pre); err != nil {
		return
	}
	if string(pre[:4]) != "HBas" || pre[4] != 0 || pre[5] != 0x50 {
		s.t.Errorf("bad preamble %q", pre)
		return
	}
	hb, err := readFrame(r)
	if err != nil {
		return
	}
	ch := &pb.ConnectionHeader{}
	if err := proto.Unmarshal(hb, ch); err != nil {
		s.t.Errorf("bad connection header: %v", err)
		return
	}
	s.mu.Lock()
	s.headers = append(s.headers, ch)
	s.mu.Unlock()
	var pending sync.WaitGroup
	defer pending.Wait()
	for {
		frame, err := readFrame(r)
		if err != nil {
			s.mu.Lock()
			s.ended++
			s.mu.Unlock()
			return
		}
		hbytes, n := protowire.ConsumeBytes(frame)
		if n < 0 {
			s.t.Errorf("bad request header length")
			return
		}
		hdr := &pb.RequestHeader{}
		if err := proto.Unmarshal(hbytes, hdr); err != nil {
			s.t.Errorf("bad request header: %v", err)
			return
		}
		param, m := protowire.ConsumeBytes(frame[n:])
		if m < 0 || n+m != len(frame) {
			s.t.Errorf("bad request param framing")
			return
		}
		rep := s.handler(fakeRequest{header: hdr, param: param, conn: c})
		switch {
		case rep.close:
			return
		case rep.drop:
			continue
		case rep.delay > 0:
			pending.Add(1)
			go func() {
				defer pending.Done()
				time.Sleep(rep.delay)
				c.reply(hdr.GetCallId(), rep)
			}()
		default:
			c.reply(hdr.GetCallId(), rep)
		}
	}
}

func readFrame(r io.Reader) ([]byte, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(lb[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func (c *fakeConn) reply(id uint32, rep fakeReply) {
	hdr := &pb.ResponseHeader{CallId: proto.Uint32(id), Exception: rep.exc}
	hb, _ := proto.Marshal(hdr)
	body := protowire.AppendBytes(nil, hb)
	if rep.exc == nil && rep.resp != nil {
		rb, _ := proto.Marshal(rep.resp)
		body = protowire.AppendBytes(body, rb)
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	frame = append(frame, body...)
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, _ = c.nc.Write(frame)
}

func mustUnmarshal(t *testing.T, b []byte, m proto.Message) {
	t.Helper()
	if err := proto.Unmarshal(b, m); err != nil {
		t.Errorf("unmarshal %T: %v", m, err)
	}
}

var errUnexpected = errors.New("unexpected")
