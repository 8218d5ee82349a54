package hbaserpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newUnitClient returns a Client wired to fake servers: hbase:meta is at metaAddr.
func newUnitClient(t *testing.T, metaAddr string, tweak func(*Config)) *Client {
	t.Helper()
	cfg := Config{ZKQuorum: "127.0.0.1:1", BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxAttempts: 5}
	if tweak != nil {
		tweak(&cfg)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(cfg)
	c.metaAddr = metaAddr
	t.Cleanup(func() { c.Close() })
	return c
}

func TestEncodeRequestFraming(t *testing.T) {
	param := []byte("hello param")
	frame := encodeRequest(7, "Get", param, 1500)
	if got := binary.BigEndian.Uint32(frame); int(got) != len(frame)-4 {
		t.Fatalf("length prefix %d, frame body %d", got, len(frame)-4)
	}
	hb, n := protowire.ConsumeBytes(frame[4:])
	if n < 0 {
		t.Fatal("bad header varint")
	}
	hdr := &pb.RequestHeader{}
	if err := proto.Unmarshal(hb, hdr); err != nil {
		t.Fatal(err)
	}
	if hdr.GetCallId() != 7 || hdr.GetMethodName() != "Get" || !hdr.GetRequestParam() || hdr.GetTimeout() != 1500 {
		t.Fatalf("header = %v", hdr)
	}
	p, m := protowire.ConsumeBytes(frame[4+n:])
	if m < 0 || !bytes.Equal(p, param) || 4+n+m != len(frame) {
		t.Fatalf("param = %q (m=%d)", p, m)
	}
}

func TestDecodeResponse(t *testing.T) {
	body, _ := proto.Marshal(&pb.GetResponse{Result: &pb.Result{Cell: []*pb.Cell{{Value: []byte("v")}}}})
	hb, _ := proto.Marshal(&pb.ResponseHeader{CallId: proto.Uint32(3)})
	frame := protowire.AppendBytes(protowire.AppendBytes(nil, hb), body)
	hdr, b, err := decodeResponse(frame)
	if err != nil || hdr.GetCallId() != 3 || !bytes.Equal(b, body) {
		t.Fatalf("decode = %v, %q, %v", hdr, b, err)
	}

	hb, _ = proto.Marshal(&pb.ResponseHeader{CallId: proto.Uint32(4), Exception: &pb.ExceptionResponse{
		ExceptionClassName: proto.String(classNotServingRegion),
		StackTrace:         proto.String(classNotServingRegion + ": region x is not online\n\tat Foo.bar(Foo.java:1)"),
		DoNotRetry:         proto.Bool(false),
	}})
	hdr, b, err = decodeResponse(protowire.AppendBytes(nil, hb))
	if err != nil || b != nil || hdr.GetException() == nil {
		t.Fatalf("decode exception = %v, %q, %v", hdr, b, err)
	}
	re := remoteError(hdr.GetException())
	if re.Class != classNotServingRegion || re.Message != "region x is not online" {
		t.Fatalf("remote error = %+v", re)
	}
	if _, _, err := decodeResponse([]byte{0xff}); err == nil {
		t.Fatal("truncated frame decoded without error")
	}
}

func TestParseZNode(t *testing.T) {
	msg, _ := proto.Marshal(&pb.MetaRegionServer{Server: &pb.ServerName{HostName: proto.String("rs1"), Port: proto.Uint32(16020), StartCode: proto.Uint64(5)}})
	data := []byte{0xff}
	data = binary.BigEndian.AppendUint32(data, 5)
	data = append(data, "12345"...)
	data = append(data, "PBUF"...)
	data = append(data, msg...)
	var m pb.MetaRegionServer
	if err := parseZNode(data, &m); err != nil {
		t.Fatal(err)
	}
	if serverAddr(m.GetServer()) != "rs1:16020" {
		t.Fatalf("addr = %s", serverAddr(m.GetServer()))
	}
	if err := parseZNode([]byte{0xff, 0, 0, 0, 50}, &m); err == nil {
		t.Fatal("bad id length accepted")
	}
	if err := parseZNode(append([]byte{0xff, 0, 0, 0, 0}, "XXXX"...), &m); err == nil {
		t.Fatal("missing magic accepted")
	}
}

func TestNamesAndKeys(t *testing.T) {
	if got := string(metaKey("t1", []byte("row"))); got != "t1,row,99999999999999" {
		t.Fatalf("metaKey = %q", got)
	}
	tn := tableName("t1")
	if string(tn.GetNamespace()) != "default" || string(tn.GetQualifier()) != "t1" || tableString(tn) != "t1" {
		t.Fatalf("tableName(t1) = %v", tn)
	}
	tn = tableName("ns:t2")
	if string(tn.GetNamespace()) != "ns" || tableString(tn) != "ns:t2" {
		t.Fatalf("tableName(ns:t2) = %v", tn)
	}
}

func TestMutationProtos(t *testing.T) {
	f := []byte("f")
	p := &Put{Row: []byte("r"), Values: []Value{{f, []byte("a"), []byte("1")}, {[]byte("g"), []byte("b"), []byte("2")}, {f, []byte("c"), nil}}, TTL: 1500 * time.Millisecond}
	mp, err := p.toProto(0)
	if err != nil {
		t.Fatal(err)
	}
	if mp.GetMutateType() != pb.MutationProto_PUT || len(mp.GetColumnValue()) != 2 || len(mp.GetColumnValue()[0].GetQualifierValue()) != 2 {
		t.Fatalf("put proto = %v", mp)
	}
	if mp.Nonce != nil {
		t.Fatal("put carries a nonce")
	}
	if len(mp.GetAttribute()) != 1 || mp.GetAttribute()[0].GetName() != "_ttl" ||
		!bytes.Equal(mp.GetAttribute()[0].GetValue(), []byte{0, 0, 0, 0, 0, 0, 0x05, 0xdc}) {
		t.Fatalf("ttl attribute = %v", mp.GetAttribute())
	}
	if v := mp.GetColumnValue()[0].GetQualifierValue()[1]; v.Value == nil {
		t.Fatal("nil value not sent as empty")
	}

	inc := &Increment{Row: []byte("r"), Deltas: []Delta{{f, []byte("n"), -3}}}
	mp, _ = inc.toProto(42)
	if mp.GetMutateType() != pb.MutationProto_INCREMENT || mp.GetNonce() != 42 {
		t.Fatalf("increment proto = %v", mp)
	}
	if n, _ := Int64(mp.GetColumnValue()[0].GetQualifierValue()[0].GetValue()); n != -3 {
		t.Fatalf("delta = %d", n)
	}

	d := &Delete{Row: []byte("r"), Columns: []Column{{Family: f}, {Family: f, Qualifier: []byte("q")}}}
	mp, _ = d.toProto(0)
	qvs := mp.GetColumnValue()[0].GetQualifierValue()
	if mp.GetMutateType() != pb.MutationProto_DELETE || len(qvs) != 2 ||
		qvs[0].GetDeleteType() != pb.MutationProto_DELETE_FAMILY || qvs[1].GetDeleteType() != pb.MutationProto_DELETE_MULTIPLE_VERSIONS ||
		qvs[1].GetTimestamp() != math.MaxInt64 {
		t.Fatalf("delete proto = %v", mp)
	}
	mp, _ = (&Delete{Row: []byte("r")}).toProto(0)
	if len(mp.GetColumnValue()) != 0 {
		t.Fatalf("row delete has columns: %v", mp)
	}
	for _, bad := range []Mutation{&Put{Row: []byte("r")}, &Put{Values: []Value{{f, f, f}}}, &Increment{Row: []byte("r")}, &Delete{Row: []byte("r"), Columns: []Column{{}}}} {
		if _, err := bad.toProto(0); err == nil {
			t.Errorf("%T %+v accepted", bad, bad)
		}
	}
}

func TestConditionProto(t *testing.T) {
	pc, err := IfAbsent([]byte("f"), []byte("q")).toProto([]byte("r"))
	if err != nil {
		t.Fatal(err)
	}
	if pc.GetCompareType() != pb.CompareType_EQUAL || pc.GetComparator().GetName() != "org.apache.hadoop.hbase.filter.BinaryComparator" {
		t.Fatalf("absent condition = %v", pc)
	}
	var bc pb.BinaryComparator
	mustUnmarshal(t, pc.GetComparator().GetSerializedComparator(), &bc)
	if bc.GetComparable().Value != nil {
		t.Fatalf("absent comparator has a value: %v", &bc)
	}
	pc, _ = IfEquals([]byte("f"), []byte("q"), []byte("v")).toProto([]byte("r"))
	mustUnmarshal(t, pc.GetComparator().GetSerializedComparator(), &bc)
	if string(bc.GetComparable().GetValue()) != "v" || string(pc.GetRow()) != "r" {
		t.Fatalf("equals condition = %v", pc)
	}
	if _, err := IfEquals([]byte("f"), []byte("q"), nil).toProto([]byte("r")); err == nil {
		t.Fatal("equals-empty accepted")
	}
}

func TestGetProtoColumns(t *testing.T) {
	g := toGetProto([]byte("r"), []Column{{[]byte("f"), []byte("a")}, {[]byte("g"), nil}, {[]byte("f"), []byte("b")}, {[]byte("g"), []byte("x")}})
	if len(g.GetColumn()) != 2 || len(g.GetColumn()[0].GetQualifier()) != 2 || len(g.GetColumn()[1].GetQualifier()) != 0 {
		t.Fatalf("get columns = %v", g.GetColumn())
	}
}

func reg(start, end, name, server string) *Region {
	return &Region{Table: "t", Name: []byte(name), StartKey: []byte(start), EndKey: []byte(end), Server: server}
}

func TestRegionCache(t *testing.T) {
	rc := newRegionCache()
	rc.add(reg("", "m", "a", "s1"))
	rc.add(reg("m", "", "b", "s2"))
	for row, want := range map[string]string{"": "a", "a": "a", "l\xff": "a", "m": "b", "zz": "b"} {
		if r := rc.lookup("t", []byte(row)); r == nil || string(r.Name) != want {
			t.Errorf("lookup(%q) = %v, want %s", row, r, want)
		}
	}
	if rc.lookup("other", []byte("a")) != nil {
		t.Error("lookup in unknown table found a region")
	}
	// A split of "b" into [m,t) and [t,): the new regions evict the old one.
	rc.add(reg("m", "t", "b1", "s2"))
	if r := rc.lookup("t", []byte("z")); r != nil {
		t.Errorf("stale region survived a split: %v", r)
	}
	rc.add(reg("t", "", "b2", "s3"))
	if r := rc.lookup("t", []byte("z")); r == nil || string(r.Name) != "b2" {
		t.Errorf("lookup(z) = %v", r)
	}
	if r := rc.lookup("t", []byte("n")); r == nil || string(r.Name) != "b1" {
		t.Errorf("lookup(n) = %v", r)
	}
	rc.invalidate(reg("m", "t", "b1", "s2"))
	if r := rc.lookup("t", []byte("n")); r != nil {
		t.Errorf("invalidated region found: %v", r)
	}
	rc.invalidateServer("s1")
	if r := rc.lookup("t", []byte("a")); r != nil {
		t.Errorf("region of invalidated server found: %v", r)
	}
	if r := rc.lookup("t", []byte("z")); r == nil {
		t.Error("region of another server lost")
	}
	rc.invalidateTable("t")
	if r := rc.lookup("t", []byte("z")); r != nil {
		t.Error("region survived invalidateTable")
	}
}

func TestErrorShapes(t *testing.T) {
	re := &RemoteError{Class: classNotServingRegion, Message: "gone"}
	err := toDcsync("hbase.Get", re)
	var got *RemoteError
	if !errors.As(err, &got) || got.Class != classNotServingRegion {
		t.Fatalf("RemoteError not reachable in %v", err)
	}
	if dcsync.CodeOf(err) != dcsync.Internal {
		t.Fatalf("code = %v", dcsync.CodeOf(err))
	}
	if dcsync.CodeOf(toDcsync("op", &connError{sent: true, err: errUnexpected})) != dcsync.Connection {
		t.Fatal("in-doubt connection error is not a Connection error")
	}
	if classify(re) != kindRetry || classify(&RemoteError{Class: classNotServingRegion, DoNotRetry: true}) != kindFatal {
		t.Fatal("classify remote errors")
	}
	if classify(&connError{err: errUnexpected}) != kindRetry || classify(&timeoutError{}) != kindInDoubt {
		t.Fatal("classify transport errors")
	}
	if firstLineMessage("a.B", "a.B: msg\n\tat x") != "msg" || firstLineMessage("a.B", "a.B") != "" {
		t.Fatal("firstLineMessage")
	}
}

// echoGet answers Get requests with one cell whose value is the requested row.
func echoGet(t *testing.T, req fakeRequest) proto.Message {
	var g pb.GetRequest
	mustUnmarshal(t, req.param, &g)
	return &pb.GetResponse{Result: &pb.Result{Cell: []*pb.Cell{{Row: g.GetGet().GetRow(), Family: []byte("f"), Qualifier: []byte("q"), Value: g.GetGet().GetRow()}}}}
}

func TestPipelinedCalls(t *testing.T) {
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		return fakeReply{resp: echoGet(t, req), delay: time.Duration(rand.IntN(20)) * time.Millisecond}
	})
	c := newUnitClient(t, srv.addr(), nil)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			row := fmt.Appendf(nil, "row-%d", i)
			req := &pb.GetRequest{Region: regionSpec(reg("", "", "t,,1", srv.addr())), Get: &pb.Get{Row: row}}
			resp := &pb.GetResponse{}
			if err := c.rpc(context.Background(), srv.addr(), serviceClient, "Get", req, resp); err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			if v := resp.GetResult().GetCell()[0].GetValue(); !bytes.Equal(v, row) {
				t.Errorf("call %d got the reply for %q", i, v)
			}
		})
	}
	wg.Wait()
	if n := srv.acceptedCount(); n != 1 {
		t.Fatalf("%d connections for one server, want 1", n)
	}
	srv.mu.Lock()
	h := srv.headers[0]
	srv.mu.Unlock()
	if h.GetServiceName() != "ClientService" || h.GetUserInfo().GetEffectiveUser() == "" || h.CellBlockCodecClass != nil {
		t.Fatalf("connection header = %v", h)
	}
}

// TestCancelIsPromptAndLateReplyDiscarded: a cancelled (or timed-out) call returns
// without its reply, and the reply arriving later is dropped, not handed to the next
// call. The server holds each reply back until the test lets it go, after the call
// returned: the call cannot have waited for it, however slow a loaded machine is.
func TestCancelIsPromptAndLateReplyDiscarded(t *testing.T) {
	var mu sync.Mutex
	var gate chan struct{} // while set, the server holds replies until it is closed
	arrived := make(chan struct{}, 4)
	hold := func() chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		gate = make(chan struct{})
		return gate
	}
	open := func(g chan struct{}) {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-g:
		default:
			close(g)
		}
		if gate == g {
			gate = nil
		}
	}
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		mu.Lock()
		g := gate
		mu.Unlock()
		if g != nil {
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-g
		}
		return fakeReply{resp: echoGet(t, req)}
	})
	c := newUnitClient(t, srv.addr(), nil)
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})
	// get runs a Get and waits for it a minute at most: a call that waits for its
	// held-back reply never returns.
	get := func(ctx context.Context, row string) error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := c.Get(ctx, "t", []byte(row))
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			t.Fatalf("Get of %q still waiting a minute after its context ended", row)
			return nil
		}
	}
	g := hold()
	t.Cleanup(func() { open(g) })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-arrived: // the request is at the server: cancel it in flight
		case <-time.After(time.Minute):
		}
		cancel()
	}()
	err := get(ctx, "a")
	if !errors.Is(err, context.Canceled) || dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("cancelled Get error = %v", err)
	}
	open(g) // the late reply to "a" goes out before the server reads the next request
	cells, err := c.Get(context.Background(), "t", []byte("b"))
	if err != nil || len(cells) != 1 || string(cells[0].Value) != "b" {
		t.Fatalf("Get after cancel = %v, %v", cells, err)
	}
	if n := srv.acceptedCount(); n != 1 {
		t.Fatalf("connection was re-dialled (%d), want reuse", n)
	}
	// A deadline behaves the same.
	g2 := hold()
	t.Cleanup(func() { open(g2) })
	ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if err := get(ctx, "c"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline Get error = %v", err)
	}
	open(g2)
	cells, err = c.Get(context.Background(), "t", []byte("d"))
	if err != nil || len(cells) != 1 || string(cells[0].Value) != "d" {
		t.Fatalf("Get after a deadline = %v, %v", cells, err)
	}
}

func TestBrokenConnectionFailsPendingAndRedials(t *testing.T) {
	var drop atomic.Bool
	drop.Store(true)
	var received atomic.Int32
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		received.Add(1)
		if drop.Load() {
			return fakeReply{drop: true}
		}
		return fakeReply{resp: echoGet(t, req)}
	})
	c := newUnitClient(t, srv.addr(), nil)
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			req := &pb.GetRequest{Region: regionSpec(reg("", "", "t,,1", srv.addr())), Get: &pb.Get{Row: []byte("x")}}
			errs <- c.rpc(context.Background(), srv.addr(), serviceClient, "Get", req, &pb.GetResponse{})
		}()
	}
	for received.Load() < 5 {
		time.Sleep(5 * time.Millisecond)
	}
	srv.closeConns()
	for range 5 {
		select {
		case err := <-errs:
			var ce *connError
			if !errors.As(err, &ce) || !ce.sent {
				t.Fatalf("pending call error = %v, want in-doubt connError", err)
			}
			if dcsync.CodeOf(toDcsync("op", err)) != dcsync.Connection {
				t.Fatalf("code of %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("pending call not failed after the connection broke")
		}
	}
	drop.Store(false)
	resp := &pb.GetResponse{}
	req := &pb.GetRequest{Region: regionSpec(reg("", "", "t,,1", srv.addr())), Get: &pb.Get{Row: []byte("y")}}
	if err := c.rpc(context.Background(), srv.addr(), serviceClient, "Get", req, resp); err != nil {
		t.Fatalf("call after break: %v", err)
	}
	if n := srv.acceptedCount(); n != 2 {
		t.Fatalf("accepted %d connections, want 2 (one re-dial)", n)
	}
}

// metaRow builds an hbase:meta row for a region of table "t".
func metaRow(name, start, end, server string) *pb.Result {
	ri, _ := proto.Marshal(&pb.RegionInfo{RegionId: proto.Uint64(1), TableName: tableName("t"), StartKey: []byte(start), EndKey: []byte(end)})
	row := []byte(name)
	return &pb.Result{Cell: []*pb.Cell{
		{Row: row, Family: []byte("info"), Qualifier: []byte("regioninfo"), Value: append([]byte("PBUF"), ri...)},
		{Row: row, Family: []byte("info"), Qualifier: []byte("server"), Value: []byte(server)},
		{Row: row, Family: []byte("info"), Qualifier: []byte("state"), Value: []byte("OPEN")},
	}}
}

func TestStaleRegionIsRelocated(t *testing.T) {
	var metaScans, gets atomic.Int32
	var addr string
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		switch req.header.GetMethodName() {
		case "Scan":
			var sr pb.ScanRequest
			mustUnmarshal(t, req.param, &sr)
			if string(sr.GetRegion().GetValue()) != "hbase:meta,,1" || !sr.GetScan().GetReversed() ||
				string(sr.GetScan().GetStartRow()) != "t,a,99999999999999" {
				t.Errorf("unexpected meta scan %v", &sr)
			}
			metaScans.Add(1)
			return fakeReply{resp: &pb.ScanResponse{Results: []*pb.Result{metaRow("t,,2.new.", "", "", addr)}, MoreResults: proto.Bool(false)}}
		case "Get":
			gets.Add(1)
			var g pb.GetRequest
			mustUnmarshal(t, req.param, &g)
			if string(g.GetRegion().GetValue()) != "t,,2.new." {
				return fakeReply{exc: &pb.ExceptionResponse{ExceptionClassName: proto.String(classNotServingRegion), StackTrace: proto.String(classNotServingRegion + ": " + string(g.GetRegion().GetValue()) + " is not online")}}
			}
			return fakeReply{resp: echoGet(t, req)}
		}
		t.Errorf("unexpected method %s", req.header.GetMethodName())
		return fakeReply{close: true}
	})
	addr = srv.addr()
	c := newUnitClient(t, addr, nil)
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1.old."), Server: addr})
	cells, err := c.Get(context.Background(), "t", []byte("a"))
	if err != nil || len(cells) != 1 {
		t.Fatalf("Get = %v, %v", cells, err)
	}
	if metaScans.Load() != 1 || gets.Load() != 2 {
		t.Fatalf("meta scans %d, gets %d; want 1, 2", metaScans.Load(), gets.Load())
	}
	if r := c.regions.lookup("t", []byte("zzz")); r == nil || string(r.Name) != "t,,2.new." {
		t.Fatalf("cache holds %v", r)
	}
}

func TestRetriesExhausted(t *testing.T) {
	var n atomic.Int32
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		n.Add(1)
		return fakeReply{exc: &pb.ExceptionResponse{ExceptionClassName: proto.String(classRegionTooBusy), StackTrace: proto.String(classRegionTooBusy + ": busy")}}
	})
	c := newUnitClient(t, srv.addr(), func(cfg *Config) { cfg.MaxAttempts = 4 })
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})
	_, err := c.Get(context.Background(), "t", []byte("a"))
	if dcsync.CodeOf(err) != dcsync.RetriesExhausted || !hasRemoteClass(err, classRegionTooBusy) {
		t.Fatalf("error = %v", err)
	}
	if n.Load() != 4 {
		t.Fatalf("%d attempts, want 4", n.Load())
	}
}

func TestDoNotRetryIsFinal(t *testing.T) {
	var n atomic.Int32
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		n.Add(1)
		return fakeReply{exc: &pb.ExceptionResponse{ExceptionClassName: proto.String(classNoSuchColumnFamily), StackTrace: proto.String("x: no family"), DoNotRetry: proto.Bool(true)}}
	})
	c := newUnitClient(t, srv.addr(), nil)
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})
	err := c.Put(context.Background(), "t", &Put{Row: []byte("a"), Values: []Value{{[]byte("nope"), []byte("q"), []byte("v")}}})
	var re *RemoteError
	if dcsync.CodeOf(err) != dcsync.Internal || !errors.As(err, &re) || re.Class != classNoSuchColumnFamily || n.Load() != 1 {
		t.Fatalf("error = %v after %d attempts", err, n.Load())
	}
}

// TestIncrementRetryReusesNonce: a lost reply to an Increment is retried with the
// same nonce group and nonce; a CheckAndMutate with a lost reply is not retried.
func TestIncrementRetryReusesNonce(t *testing.T) {
	var mu sync.Mutex
	var seen []*pb.MutateRequest
	var addr string
	srv := newFakeServer(t, func(req fakeRequest) fakeReply {
		if req.header.GetMethodName() == "Scan" { // re-location after the broken connection
			return fakeReply{resp: &pb.ScanResponse{Results: []*pb.Result{metaRow("t,,1", "", "", addr)}, MoreResults: proto.Bool(false)}}
		}
		var m pb.MutateRequest
		mustUnmarshal(t, req.param, &m)
		mu.Lock()
		seen = append(seen, &m)
		first := len(seen) == 1
		mu.Unlock()
		if first {
			return fakeReply{close: true} // "applied", reply lost
		}
		return fakeReply{resp: &pb.MutateResponse{Result: &pb.Result{Cell: []*pb.Cell{{Value: binary.BigEndian.AppendUint64(nil, 1)}}}}}
	})
	addr = srv.addr()
	c := newUnitClient(t, srv.addr(), nil)
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: srv.addr()})
	cells, err := c.Increment(context.Background(), "t", &Increment{Row: []byte("a"), Deltas: []Delta{{[]byte("f"), []byte("n"), 1}}})
	if err != nil || len(cells) != 1 {
		t.Fatalf("Increment = %v, %v", cells, err)
	}
	mu.Lock()
	if len(seen) != 2 || seen[0].GetNonceGroup() == 0 || seen[0].GetMutation().GetNonce() == 0 ||
		seen[0].GetNonceGroup() != seen[1].GetNonceGroup() || seen[0].GetMutation().GetNonce() != seen[1].GetMutation().GetNonce() {
		t.Fatalf("attempts did not reuse one nonce: %v", seen)
	}
	seen = nil
	mu.Unlock()

	_, _, err = c.CheckAndMutate(context.Background(), "t", []byte("a"), IfAbsent([]byte("f"), []byte("q")), &Put{Values: []Value{{[]byte("f"), []byte("q"), []byte("v")}}})
	if dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("in-doubt CheckAndMutate error = %v, want Connection", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("in-doubt CheckAndMutate sent %d times, want 1", len(seen))
	}
}

func TestDialUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := Dial(ctx, Config{ZKQuorum: addr, DialTimeout: 500 * time.Millisecond})
	if err == nil {
		c.Close()
		t.Fatal("Dial to a closed port succeeded")
	}
	// Judged with room for a loaded machine: a Dial that ignored its deadline would
	// go on retrying far longer.
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("Dial took %v, far past its 1.5s deadline", el)
	}
	if !errors.Is(err, dcsync.ErrConnection) {
		t.Fatalf("Dial error = %v, want a Connection error", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	if _, err := (Config{}).withDefaults(); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("empty quorum: %v", err)
	}
	cfg, err := Config{ZKQuorum: "a, b:2182", ZKRoot: "hb/"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ZKRoot != "/hb" || cfg.MaxAttempts != 10 || cfg.Logger == nil || cfg.User == "" {
		t.Fatalf("defaults = %+v", cfg)
	}
	if s := cfg.zkServers(); len(s) != 2 || s[0] != "a:2181" || s[1] != "b:2182" {
		t.Fatalf("servers = %v", s)
	}
}

func TestTimestampProtos(t *testing.T) {
	f := []byte("f")
	mp, err := (&Put{Row: []byte("r"), Values: []Value{{f, []byte("a"), []byte("1")}}, Timestamp: 1234}).toProto(0)
	if err != nil || mp.GetTimestamp() != 1234 || mp.GetColumnValue()[0].GetQualifierValue()[0].GetTimestamp() != 1234 {
		t.Fatalf("put with timestamp = %v, %v", mp, err)
	}
	mp, _ = (&Put{Row: []byte("r"), Values: []Value{{f, []byte("a"), []byte("1")}}}).toProto(0)
	if mp.Timestamp != nil || mp.GetColumnValue()[0].GetQualifierValue()[0].Timestamp != nil {
		t.Fatalf("put without timestamp carries one: %v", mp)
	}
	mp, _ = (&Delete{Row: []byte("r"), Timestamp: 99}).toProto(0)
	if mp.GetTimestamp() != 99 {
		t.Fatalf("row delete at 99 = %v", mp)
	}
	mp, _ = (&Delete{Row: []byte("r"), Columns: []Column{{f, []byte("q")}, {Family: f}}, Timestamp: 99}).toProto(0)
	for _, qv := range mp.GetColumnValue()[0].GetQualifierValue() {
		if qv.GetTimestamp() != 99 {
			t.Fatalf("column delete at 99 = %v", mp)
		}
	}
	mp, _ = (&Increment{Row: []byte("r"), Deltas: []Delta{{f, []byte("n"), 1}}, SkipWAL: true}).toProto(0)
	if mp.GetDurability() != pb.MutationProto_SKIP_WAL {
		t.Fatalf("SkipWAL increment = %v", mp)
	}
	for _, bad := range []Mutation{&Put{Row: []byte("r"), Values: []Value{{f, f, f}}, Timestamp: -1}, &Delete{Row: []byte("r"), Timestamp: -1}} {
		if _, err := bad.toProto(0); err == nil {
			t.Errorf("%T %+v accepted", bad, bad)
		}
	}
}

func TestConditionKinds(t *testing.T) {
	f := []byte("f")
	pc, err := IfPresent(f, []byte("q")).toProto([]byte("r"))
	if err != nil || pc.GetCompareType() != pb.CompareType_NOT_EQUAL {
		t.Fatalf("present condition = %v, %v", pc, err)
	}
	var bc pb.BinaryComparator
	mustUnmarshal(t, pc.GetComparator().GetSerializedComparator(), &bc)
	if bc.GetComparable().Value != nil {
		t.Fatalf("present comparator has a value: %v", &bc)
	}
	pc, err = IfAll(IfEquals(f, []byte("a"), []byte("1")), IfEquals(f, []byte("b"), []byte("2"))).toProto([]byte("r"))
	if err != nil || pc.GetFilter().GetName() != filterList || pc.Family != nil || string(pc.GetRow()) != "r" {
		t.Fatalf("all condition = %v, %v", pc, err)
	}
	// FilterList{operator MUST_PASS_ALL, two SingleColumnValueFilters}.
	b := pc.GetFilter().GetSerializedFilter()
	var names []string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		switch {
		case num == filterListOperator && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if v != filterListPassAll {
				t.Fatalf("operator %d", v)
			}
			b = b[n:]
		case num == filterListFilters && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			var fl pb.Filter
			mustUnmarshal(t, v, &fl)
			names = append(names, fl.GetName())
			b = b[n:]
		default:
			t.Fatalf("unexpected field %d", num)
		}
	}
	if len(names) != 2 || names[0] != filterSCVF || names[1] != filterSCVF {
		t.Fatalf("filters %v", names)
	}
	// IfAll of IfAbsent and IfPresent: EQUAL to nothing with missing columns passing,
	// NOT_EQUAL to nothing with missing columns filtered.
	pc, err = IfAll(IfEquals(f, []byte("a"), []byte("1")), IfAbsent(f, []byte("b")), IfPresent(f, []byte("c"))).toProto([]byte("r"))
	if err != nil {
		t.Fatal(err)
	}
	type scvf struct {
		qual      string
		op        uint64
		value     []byte
		ifMissing uint64
	}
	var got []scvf
	b = pc.GetFilter().GetSerializedFilter()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		if num != filterListFilters || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		b = b[n:]
		var fl pb.Filter
		mustUnmarshal(t, v, &fl)
		var x scvf
		ser := fl.GetSerializedFilter()
		for len(ser) > 0 {
			num, typ, n := protowire.ConsumeTag(ser)
			ser = ser[n:]
			switch {
			case num == scvfQualifier:
				q, n := protowire.ConsumeBytes(ser)
				x.qual, ser = string(q), ser[n:]
			case num == scvfCompareOp:
				x.op, n = protowire.ConsumeVarint(ser)
				ser = ser[n:]
			case num == scvfFilterIfMissing:
				x.ifMissing, n = protowire.ConsumeVarint(ser)
				ser = ser[n:]
			case num == scvfComparator:
				cb, n := protowire.ConsumeBytes(ser)
				ser = ser[n:]
				var cmp pb.Comparator
				mustUnmarshal(t, cb, &cmp)
				var bc pb.BinaryComparator
				mustUnmarshal(t, cmp.GetSerializedComparator(), &bc)
				x.value = bc.GetComparable().GetValue()
			default:
				ser = ser[protowire.ConsumeFieldValue(num, typ, ser):]
			}
		}
		got = append(got, x)
	}
	want := []scvf{
		{"a", uint64(pb.CompareType_EQUAL), []byte("1"), 1},
		{"b", uint64(pb.CompareType_EQUAL), nil, 0},
		{"c", uint64(pb.CompareType_NOT_EQUAL), nil, 1},
	}
	if len(got) != len(want) {
		t.Fatalf("filters %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].qual != want[i].qual || got[i].op != want[i].op || !bytes.Equal(got[i].value, want[i].value) || got[i].ifMissing != want[i].ifMissing {
			t.Errorf("filter %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []Condition{IfAll(IfEquals(f, f, nil)), IfAll(IfEquals(nil, f, f)), IfAll(IfAll(IfAbsent(f, f))), IfAll(Condition{Family: f, Absent: true, Present: true}), {Family: f, Absent: true, Present: true}} {
		if _, err := bad.toProto([]byte("r")); err == nil {
			t.Errorf("condition %+v accepted", bad)
		}
	}
}

func TestRetrySafe(t *testing.T) {
	c := &Client{}
	f := []byte("f")
	inc := func(q string) *Increment { return &Increment{Deltas: []Delta{{f, []byte(q), 1}}} }
	del := func(q string, ts int64) *Delete { return &Delete{Columns: []Column{{f, []byte(q)}}, Timestamp: ts} }
	cond := IfEquals(f, []byte("m"), []byte("x"))
	for _, tc := range []struct {
		muts []Mutation
		want bool
	}{
		{[]Mutation{inc("n")}, true},
		{[]Mutation{inc("n"), del("n", 5)}, true},
		{[]Mutation{inc("m")}, false},              // increments the checked column
		{[]Mutation{inc("n"), del("m", 5)}, false}, // deletes it
		{[]Mutation{inc("n"), del("n", 0)}, false}, // a delete stamped "now" is not the same twice
		{[]Mutation{del("n", 5)}, false},
		{[]Mutation{&Put{Values: []Value{{f, []byte("n"), f}}}}, false},
	} {
		if got := c.retrySafe(cond, tc.muts); got != tc.want {
			t.Errorf("retrySafe(%+v) = %v, want %v", tc.muts, got, tc.want)
		}
	}
	if c.retrySafe(IfAll(cond, IfEquals(f, []byte("n"), f)), []Mutation{inc("n")}) {
		t.Error("retrySafe with an IfAll reading the incremented column")
	}
	if (&Client{noNonces: true}).retrySafe(cond, []Mutation{inc("n")}) {
		t.Error("retrySafe without nonces")
	}
}
