package hbaserpc

import (
	"bufio"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// fakeZK speaks just enough of ZooKeeper's wire protocol (session handshake,
// getData, ping, close) for the client's lookups of hbase:meta and the master, and
// counts the sessions opened.
type fakeZK struct {
	t  *testing.T
	ln net.Listener
	// delay holds every getData reply this long, so that lookups made at about the
	// same time overlap (and would open one session each if not de-duplicated).
	delay time.Duration

	mu       sync.Mutex
	nodes    map[string][]byte
	sessions int
	conns    []net.Conn
	wg       sync.WaitGroup
}

// ZooKeeper opcodes and error codes used by the fake.
const (
	zkOpGetData = 4
	zkOpPing    = 11
	zkOpClose   = -11
	zkErrNoNode = -101
	zkErrUnimpl = -6
)

func newFakeZK(t *testing.T, delay time.Duration) *fakeZK {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z := &fakeZK{t: t, ln: ln, delay: delay, nodes: map[string][]byte{}}
	z.wg.Add(1)
	go z.accept()
	t.Cleanup(z.close)
	return z
}

func (z *fakeZK) addr() string { return z.ln.Addr().String() }

// setServer stores an HBase server znode (meta-region-server or master) naming
// addr, in the form HBase writes it: metadata prefix, "PBUF", protobuf.
func (z *fakeZK) setServer(path, addr string, master bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		z.t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	sn := &pb.ServerName{HostName: proto.String(host), Port: proto.Uint32(uint32(p)), StartCode: proto.Uint64(1)}
	var m proto.Message = &pb.MetaRegionServer{Server: sn}
	if master {
		m = &pb.Master{Master: sn}
	}
	b, _ := proto.Marshal(m)
	data := []byte{0xff}
	data = binary.BigEndian.AppendUint32(data, 4)
	data = append(data, "1234PBUF"...)
	data = append(data, b...)
	z.mu.Lock()
	z.nodes[path] = data
	z.mu.Unlock()
}

func (z *fakeZK) sessionCount() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.sessions
}

func (z *fakeZK) close() {
	z.ln.Close()
	z.mu.Lock()
	for _, c := range z.conns {
		c.Close()
	}
	z.mu.Unlock()
	z.wg.Wait()
}

func (z *fakeZK) accept() {
	defer z.wg.Done()
	for {
		nc, err := z.ln.Accept()
		if err != nil {
			return
		}
		z.mu.Lock()
		z.conns = append(z.conns, nc)
		z.mu.Unlock()
		z.wg.Add(1)
		go z.serve(nc)
	}
}

func (z *fakeZK) serve(nc net.Conn) {
	defer z.wg.Done()
	defer nc.Close()
	r := bufio.NewReader(nc)
	// Connect request: protocol version, last zxid, timeout, session id, password.
	req, err := readFrame(r)
	if err != nil || len(req) < 28 {
		return
	}
	z.mu.Lock()
	z.sessions++
	sid := int64(z.sessions)
	z.mu.Unlock()
	timeout := binary.BigEndian.Uint32(req[12:16])
	resp := binary.BigEndian.AppendUint32(nil, 0) // protocol version
	resp = binary.BigEndian.AppendUint32(resp, timeout)
	resp = binary.BigEndian.AppendUint64(resp, uint64(sid))
	resp = binary.BigEndian.AppendUint32(resp, 16)
	resp = append(resp, make([]byte, 16)...)
	if !writeZKFrame(nc, resp) {
		return
	}
	for {
		req, err := readFrame(r)
		if err != nil || len(req) < 8 {
			return
		}
		xid := binary.BigEndian.Uint32(req[0:4])
		op := int32(binary.BigEndian.Uint32(req[4:8]))
		hdr := func(code int32) []byte {
			b := binary.BigEndian.AppendUint32(nil, xid)
			b = binary.BigEndian.AppendUint64(b, 1) // zxid
			return binary.BigEndian.AppendUint32(b, uint32(code))
		}
		switch op {
		case zkOpGetData:
			if len(req) < 12 {
				return
			}
			n := int(binary.BigEndian.Uint32(req[8:12]))
			if 12+n > len(req) {
				return
			}
			path := req[12 : 12+n]
			time.Sleep(z.delay)
			z.mu.Lock()
			data, ok := z.nodes[string(path)]
			z.mu.Unlock()
			if !ok {
				if !writeZKFrame(nc, hdr(zkErrNoNode)) {
					return
				}
				continue
			}
			b := hdr(0)
			b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
			b = append(b, data...)
			b = append(b, make([]byte, 68)...) // a zero Stat
			if !writeZKFrame(nc, b) {
				return
			}
		case zkOpPing:
			if !writeZKFrame(nc, hdr(0)) {
				return
			}
		case zkOpClose:
			writeZKFrame(nc, hdr(0))
			return
		default:
			if !writeZKFrame(nc, hdr(zkErrUnimpl)) {
				return
			}
		}
	}
}

func writeZKFrame(nc net.Conn, b []byte) bool {
	_, err := nc.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err == nil
}
