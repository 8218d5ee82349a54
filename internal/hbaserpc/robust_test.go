package hbaserpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// slowConn writes in small chunks with a pause between them, so that a frame takes
// a while to go out and callers can be cancelled in the middle of it. Deadlines are
// those of the wrapped connection.
type slowConn struct {
	net.Conn
	chunk int
	pause time.Duration
	// midWrite, when set, is called once a write has sent its first chunk and
	// before the rest.
	midWrite func()
}

func (s *slowConn) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := s.Conn.Write(b[n:min(n+s.chunk, len(b))])
		n += m
		if err != nil {
			return n, err
		}
		if n < len(b) {
			if s.midWrite != nil && n == m {
				s.midWrite()
			}
			time.Sleep(s.pause)
		}
	}
	return n, nil
}

// waitFor polls cond until it holds, failing the test after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestCancelDuringWriteKeepsConnection pins issue 8 §4 (first item): a caller
// cancelled while its frame is queued or being written must not break the shared
// connection: every other pipelined call succeeds, and the connection stays open.
func TestCancelDuringWriteKeepsConnection(t *testing.T) {
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		return fakeReply{resp: echoGet(t, req)}
	})
	c := newUnitClient(t, srv.addr(), func(cfg *Config) {
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &slowConn{Conn: nc, chunk: 96, pause: 300 * time.Microsecond}, nil
		}
	})
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})

	const calls = 60
	var wg sync.WaitGroup
	var cancelled, failed atomic.Int32
	for i := range calls {
		ctx, cancel := context.WithCancel(context.Background())
		victim := i%3 == 0
		if victim {
			// Cancel at a random moment while the writes are going out.
			time.AfterFunc(time.Duration(rand.IntN(150_000))*time.Microsecond, cancel)
		}
		wg.Go(func() {
			defer cancel()
			row := fmt.Appendf(nil, "row-%03d-%s", i, bytes.Repeat([]byte("x"), 1000))
			cells, err := c.Get(ctx, "t", row)
			switch {
			case err == nil:
				if len(cells) != 1 || !bytes.Equal(cells[0].Value, row) {
					t.Errorf("call %d: wrong reply", i)
				}
			case victim && errors.Is(err, context.Canceled):
				cancelled.Add(1)
			default:
				failed.Add(1)
				t.Errorf("call %d (cancelled: %v): %v", i, victim, err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d calls, %d cancelled, %d failed", calls, cancelled.Load(), failed.Load())
	if n, e := srv.acceptedCount(), srv.endedCount(); n != 1 || e != 0 {
		t.Fatalf("%d connections accepted, %d closed; want 1 and 0 (one shared connection, never torn down)", n, e)
	}
}

// TestCancelMidWriteFinishesFrame: a caller cancelled while its frame is half
// written returns at once, and the frame still goes out whole (the server parses
// it), on a connection that stays up for the next call.
func TestCancelMidWriteFinishesFrame(t *testing.T) {
	var victims atomic.Int32
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		var g pb.GetRequest
		mustUnmarshal(t, req.param, &g)
		if bytes.HasPrefix(g.GetGet().GetRow(), []byte("victim")) {
			victims.Add(1)
		}
		return fakeReply{resp: echoGet(t, req)}
	})
	var armed atomic.Bool
	var cancelVictim atomic.Value // context.CancelFunc
	c := newUnitClient(t, srv.addr(), func(cfg *Config) {
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &slowConn{Conn: nc, chunk: 64, pause: time.Millisecond, midWrite: func() {
				if armed.CompareAndSwap(true, false) {
					cancelVictim.Load().(context.CancelFunc)()
				}
			}}, nil
		}
	})
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})
	if _, err := c.Get(context.Background(), "t", []byte("warm")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelVictim.Store(cancel)
	armed.Store(true)
	_, err := c.Get(ctx, "t", append([]byte("victim-"), bytes.Repeat([]byte("x"), 1000)...))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Get = %v, want context.Canceled", err)
	}
	if _, err := c.Get(context.Background(), "t", []byte("after")); err != nil {
		t.Fatalf("Get after the cancelled one: %v", err)
	}
	if victims.Load() != 1 {
		t.Fatalf("the server parsed %d copies of the cancelled request, want 1 (written whole)", victims.Load())
	}
	if n, e := srv.acceptedCount(), srv.endedCount(); n != 1 || e != 0 {
		t.Fatalf("%d connections accepted, %d closed; want 1 and 0", n, e)
	}
}

// TestSilentServerIsLeft pins issue 8 §4 (second item): a region server that
// accepts and reads but never answers (no RST) must be left: its connection closed
// and its regions relocated through hbase:meta, which now names another server.
func TestSilentServerIsLeft(t *testing.T) {
	var silent atomic.Bool
	var silentGets atomic.Int32
	srvA := newFakeServer(t, func(req fakeRequest) fakeReply {
		if silent.Load() {
			silentGets.Add(1)
			return fakeReply{drop: true}
		}
		return fakeReply{resp: echoGet(t, req)}
	})
	var addrB string
	var metaScans atomic.Int32
	srvB := newFakeServer(t, func(req fakeRequest) fakeReply {
		switch req.header.GetMethodName() {
		case "Scan":
			metaScans.Add(1)
			return fakeReply{resp: &pb.ScanResponse{Results: []*pb.Result{metaRow("t,,2.moved.", "", "", addrB)}, MoreResults: proto.Bool(false)}}
		case "Get":
			var g pb.GetRequest
			mustUnmarshal(t, req.param, &g)
			if string(g.GetRegion().GetValue()) != "t,,2.moved." {
				t.Errorf("Get on B for region %q", g.GetRegion().GetValue())
			}
			return fakeReply{resp: echoGet(t, req)}
		}
		return fakeReply{close: true}
	})
	addrB = srvB.addr()
	// hbase:meta is on B; the region is cached on A.
	c := newUnitClient(t, addrB, func(cfg *Config) {
		cfg.RPCTimeout = 300 * time.Millisecond
		cfg.MaxAttempts = 6
	})
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srvA.addr()})
	if _, err := c.Get(context.Background(), "t", []byte("warm")); err != nil {
		t.Fatalf("Get before A goes silent: %v", err)
	}
	silent.Store(true) // A goes silent; meta (on B) says the region moved to B

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cells, err := c.Get(ctx, "t", []byte("a"))
	if err != nil || len(cells) != 1 || string(cells[0].Value) != "a" {
		t.Fatalf("Get after A went silent = %v, %v (%d Gets sent to A, %d meta scans)", cells, err, silentGets.Load(), metaScans.Load())
	}
	if r := c.regions.lookup("t", []byte("a")); r == nil || r.Server != addrB {
		t.Fatalf("cache holds %v, want the region on B", r)
	}
	// The client closed its connection to A (A saw EOF), and will dial again
	// when A is named anew.
	waitFor(t, "the connection to the silent server to be closed", func() bool { return srvA.endedCount() == 1 })
	t.Logf("%d Gets sent to the silent server, %d meta scans", silentGets.Load(), metaScans.Load())
}

// TestSlowCallKeepsLiveConnection: a call that times out while the server keeps
// answering others on the same connection is a slow call, not a dead server: the
// connection stays, and so does the region location.
func TestSlowCallKeepsLiveConnection(t *testing.T) {
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		var g pb.GetRequest
		mustUnmarshal(t, req.param, &g)
		if string(g.GetGet().GetRow()) == "slow" {
			return fakeReply{drop: true}
		}
		return fakeReply{resp: echoGet(t, req), delay: 5 * time.Millisecond}
	})
	c := newUnitClient(t, srv.addr(), func(cfg *Config) {
		cfg.RPCTimeout = 300 * time.Millisecond
		cfg.MaxAttempts = 1
	})
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // steady traffic that the server answers
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Get(context.Background(), "t", []byte("fast")); err != nil {
				t.Errorf("fast Get: %v", err)
				return
			}
		}
	})
	_, err := c.Get(context.Background(), "t", []byte("slow"))
	close(stop)
	wg.Wait()
	var te *timeoutError
	if !errors.As(err, &te) || dcsync.CodeOf(err) != dcsync.RetriesExhausted {
		t.Fatalf("slow Get error = %v, want a timeout", err)
	}
	if n, e := srv.acceptedCount(), srv.endedCount(); n != 1 || e != 0 {
		t.Fatalf("%d connections accepted, %d closed; want 1 and 0", n, e)
	}
	if c.regions.lookup("t", []byte("x")) == nil {
		t.Fatal("a slow call dropped the region location")
	}
}

// TestDialWaitHonoursContext pins issue 8 §4 (third item, dials): a caller waiting
// for another caller's dial to the same server gives up when its own context ends,
// and concurrent callers share one dial.
func TestDialWaitHonoursContext(t *testing.T) {
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		return fakeReply{resp: echoGet(t, req)}
	})
	release := make(chan struct{})
	entered := make(chan struct{}, 16)
	var dials atomic.Int32
	c := newUnitClient(t, srv.addr(), func(cfg *Config) {
		cfg.DialTimeout = time.Minute
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			entered <- struct{}{}
			select { // a dial that hangs (a black-holed SYN) until released
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
	})
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})

	first := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), "t", []byte("a"))
		first <- err
	}()
	<-entered // the first caller's dial is in progress

	second := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := c.Get(ctx, "t", []byte("b"))
		second <- err
	}()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("second caller's error = %v, want its deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a caller waiting for another's dial ignored its context deadline")
		defer func() { <-second }()
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first caller: %v", err)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials, want 1", n)
	}
}

// TestRelocationScansMetaOnce pins issue 8 §4 (third item, meta): when a broken
// connection fails N pipelined calls, the N retries relocate the region with one
// hbase:meta scan, not N.
func TestRelocationScansMetaOnce(t *testing.T) {
	const n = 16
	var armed atomic.Bool
	armed.Store(true)
	var gets, scans atomic.Int32
	var addr string
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		switch req.header.GetMethodName() {
		case "Scan":
			scans.Add(1)
			// A slowish meta: relocations that are not de-duplicated overlap.
			return fakeReply{resp: &pb.ScanResponse{Results: []*pb.Result{metaRow("t,,1", "", "", addr)}, MoreResults: proto.Bool(false)}, delay: 300 * time.Millisecond}
		case "Get":
			gets.Add(1)
			if armed.Load() {
				return fakeReply{drop: true}
			}
			return fakeReply{resp: echoGet(t, req)}
		}
		return fakeReply{close: true}
	})
	addr = srv.addr()
	c := newUnitClient(t, addr, func(cfg *Config) { cfg.MaxAttempts = 10 })
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: addr})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			row := fmt.Appendf(nil, "row-%d", i)
			cells, err := c.Get(context.Background(), "t", row)
			if err != nil || len(cells) != 1 || !bytes.Equal(cells[0].Value, row) {
				t.Errorf("Get %d = %v, %v", i, cells, err)
			}
		})
	}
	waitFor(t, "all Gets to be pending", func() bool { return gets.Load() == n })
	armed.Store(false)
	srv.closeConns() // one broken connection fails every pending Get
	wg.Wait()
	t.Logf("%d calls failed by one broken connection: %d hbase:meta scans", n, scans.Load())
	if s := scans.Load(); s != 1 {
		t.Fatalf("%d hbase:meta scans to relocate one region for %d calls, want 1", s, n)
	}
}

// TestMetaLookupOneZooKeeperSession pins issue 8 §4 (third item, ZooKeeper): when
// the connection to hbase:meta breaks under N calls, they find hbase:meta again with
// one ZooKeeper session, not one each.
func TestMetaLookupOneZooKeeperSession(t *testing.T) {
	const n = 16
	var armed atomic.Bool
	armed.Store(true)
	var scans atomic.Int32
	var addr string
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		switch req.header.GetMethodName() {
		case "Scan":
			scans.Add(1)
			if armed.Load() {
				return fakeReply{drop: true}
			}
			return fakeReply{resp: &pb.ScanResponse{Results: []*pb.Result{metaRow("t,,1", "", "", addr)}, MoreResults: proto.Bool(false)}}
		case "Get":
			return fakeReply{resp: echoGet(t, req)}
		}
		return fakeReply{close: true}
	})
	addr = srv.addr()
	zk := newFakeZK(t, 300*time.Millisecond)
	zk.setServer("/hbase/meta-region-server", addr, false)
	c := newUnitClient(t, addr, func(cfg *Config) {
		cfg.ZKQuorum = zk.addr()
		cfg.MaxAttempts = 10
	})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			row := fmt.Appendf(nil, "row-%d", i)
			cells, err := c.Get(context.Background(), "t", row)
			if err != nil || len(cells) != 1 || !bytes.Equal(cells[0].Value, row) {
				t.Errorf("Get %d = %v, %v", i, cells, err)
			}
		})
	}
	waitFor(t, "a meta scan to be pending", func() bool { return scans.Load() >= 1 })
	time.Sleep(200 * time.Millisecond) // let every caller reach its region lookup
	armed.Store(false)
	srv.closeConns() // the connection to hbase:meta breaks
	wg.Wait()
	t.Logf("%d calls, hbase:meta connection broken: %d ZooKeeper sessions, %d meta scans", n, zk.sessionCount(), scans.Load())
	if s := zk.sessionCount(); s != 1 {
		t.Fatalf("%d ZooKeeper sessions to find hbase:meta again for %d calls, want 1", s, n)
	}
}

// TestConfigDialHook: Config.Dial opens the ZooKeeper and region server
// connections (master connections take the same path as region servers').
func TestConfigDialHook(t *testing.T) {
	var addr string
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		switch req.header.GetMethodName() {
		case "Scan":
			return fakeReply{resp: &pb.ScanResponse{Results: []*pb.Result{metaRow("t,,1", "", "", addr)}, MoreResults: proto.Bool(false)}}
		case "Get":
			return fakeReply{resp: echoGet(t, req)}
		}
		return fakeReply{close: true}
	})
	addr = srv.addr()
	zk := newFakeZK(t, 0)
	zk.setServer("/hbase/meta-region-server", srv.addr(), false)
	var mu sync.Mutex
	dialed := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{ZKQuorum: zk.addr(), Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed[addr]++
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Get(ctx, "t", []byte("a")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if dialed[zk.addr()] == 0 || dialed[srv.addr()] == 0 {
		t.Fatalf("dials through Config.Dial: %v; want ZooKeeper %s and the region server %s", dialed, zk.addr(), srv.addr())
	}
}

// TestRepeatedTimeoutsCloseConnection: calls that keep timing out with no reply
// between them close the connection even when each was queued before the last
// reply arrived (so none of them alone proves the server silent).
func TestRepeatedTimeoutsCloseConnection(t *testing.T) {
	var slowGets atomic.Int32
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		var g pb.GetRequest
		mustUnmarshal(t, req.param, &g)
		if bytes.HasPrefix(g.GetGet().GetRow(), []byte("slow")) {
			slowGets.Add(1)
			return fakeReply{drop: true}
		}
		return fakeReply{resp: echoGet(t, req)}
	})
	c := newUnitClient(t, srv.addr(), func(cfg *Config) {
		cfg.RPCTimeout = time.Second
		cfg.MaxAttempts = 1
	})
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})
	var wg sync.WaitGroup
	errs := make([]error, maxTimeouts)
	for i := range maxTimeouts {
		wg.Go(func() {
			_, errs[i] = c.Get(context.Background(), "t", fmt.Appendf(nil, "slow-%d", i))
		})
	}
	waitFor(t, "the slow Gets to reach the server", func() bool { return slowGets.Load() == maxTimeouts })
	if _, err := c.Get(context.Background(), "t", []byte("fast")); err != nil {
		t.Fatalf("fast Get: %v", err)
	}
	wg.Wait()
	var closed int
	for i, err := range errs {
		var te *timeoutError
		if !errors.As(err, &te) {
			t.Fatalf("slow Get %d: %v, want a timeout", i, err)
		}
		if te.closed {
			closed++
		}
	}
	if closed != 1 {
		t.Fatalf("%d timeouts closed the connection, want 1 (the %dth)", closed, maxTimeouts)
	}
	waitFor(t, "the connection to be closed", func() bool { return srv.endedCount() == 1 })
	if c.regions.lookup("t", []byte("x")) != nil {
		t.Fatal("the regions of a server whose connection was closed as dead are still cached")
	}
}

// TestBlackHoledServerIsLeft: a region server whose dials time out (SYNs dropped)
// is a transport failure, not the caller's deadline: the region is relocated
// through hbase:meta, which names another server.
func TestBlackHoledServerIsLeft(t *testing.T) {
	var addrB string
	srvB := newFakeServer(t, func(req fakeRequest) fakeReply {
		switch req.header.GetMethodName() {
		case "Scan":
			return fakeReply{resp: &pb.ScanResponse{Results: []*pb.Result{metaRow("t,,2.moved.", "", "", addrB)}, MoreResults: proto.Bool(false)}}
		case "Get":
			return fakeReply{resp: echoGet(t, req)}
		}
		return fakeReply{close: true}
	})
	addrB = srvB.addr()
	const addrA = "192.0.2.1:16020" // TEST-NET-1: never dialled for real here
	var dialsA atomic.Int32
	c := newUnitClient(t, addrB, func(cfg *Config) {
		cfg.DialTimeout = 200 * time.Millisecond
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == addrA {
				dialsA.Add(1)
				<-ctx.Done() // no SYN-ACK ever comes
				return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
	})
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: addrA})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cells, err := c.Get(ctx, "t", []byte("a"))
	if err != nil || len(cells) != 1 {
		t.Fatalf("Get with its region on a black-holed server = %v, %v (%d dials to it)", cells, err, dialsA.Load())
	}
	if n := dialsA.Load(); n != 1 {
		t.Fatalf("%d dials to the black-holed server, want 1", n)
	}
}

// stuckConn is a connection whose writes block, while stuck, as when the server
// stops reading and the TCP buffers are full.
type stuckConn struct {
	net.Conn
	stuck   *atomic.Bool
	release chan struct{}
	entered chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func (s *stuckConn) Write(b []byte) (int, error) {
	if s.stuck.Load() {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		select {
		case <-s.release:
		case <-s.closed:
			return 0, net.ErrClosed
		}
	}
	return s.Conn.Write(b)
}

func (s *stuckConn) Close() error {
	s.once.Do(func() { close(s.closed) })
	return s.Conn.Close()
}

// TestWriteWaitHonoursContext pins issue 8 §4 (third item, writes): a caller whose
// request waits behind a write that is stuck gives up when its context ends, its
// request is then never sent, and the connection is kept for the stuck one.
func TestWriteWaitHonoursContext(t *testing.T) {
	var gets atomic.Int32
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		gets.Add(1)
		return fakeReply{resp: echoGet(t, req)}
	})
	var stuck atomic.Bool
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	c := newUnitClient(t, srv.addr(), func(cfg *Config) {
		cfg.RPCTimeout = time.Minute
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &stuckConn{Conn: nc, stuck: &stuck, release: release, entered: entered, closed: make(chan struct{})}, nil
		}
	})
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})
	if _, err := c.Get(context.Background(), "t", []byte("warm")); err != nil {
		t.Fatal(err)
	}
	stuck.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), "t", []byte("a"))
		first <- err
	}()
	<-entered // the first request's write is stuck
	second := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := c.Get(ctx, "t", []byte("b"))
		second <- err
	}()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("second caller's error = %v, want its deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a caller waiting behind a stuck write ignored its context deadline")
		defer func() { <-second }()
	}
	stuck.Store(false)
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first caller: %v", err)
	}
	if n, e := srv.acceptedCount(), srv.endedCount(); n != 1 || e != 0 {
		t.Fatalf("%d connections accepted, %d closed; want 1 and 0", n, e)
	}
	if n := gets.Load(); n != 2 {
		t.Fatalf("the server received %d Gets, want 2 (the abandoned one is never sent)", n)
	}
}
