package hbaserpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// fakeRS is a fake region server answering Multi requests of puts and if-absent
// conditional puts on family f, qualifier q, from an in-memory row map.
type fakeRS struct {
	t   *testing.T
	srv *fakeServer

	mu         sync.Mutex
	rows       map[string][]byte // row -> value of f:q
	counters   map[string]int64
	nonces     map[uint64]bool
	requests   []*pb.MultiRequest
	notServing map[string]int // region name -> requests to refuse (NotServingRegion)
	drop       int            // requests to apply, then break the connection (reply lost)
	meta       func(sr *pb.ScanRequest) *pb.ScanResponse
}

func newFakeRS(t *testing.T) *fakeRS {
	f := &fakeRS{t: t, rows: map[string][]byte{}, counters: map[string]int64{}, nonces: map[uint64]bool{}, notServing: map[string]int{}}
	f.srv = newFakeServer(t, f.handle)
	return f
}

func (f *fakeRS) addr() string { return f.srv.addr() }

func (f *fakeRS) handle(req fakeRequest) fakeReply {
	switch req.header.GetMethodName() {
	case "Scan":
		var sr pb.ScanRequest
		mustUnmarshal(f.t, req.param, &sr)
		f.mu.Lock()
		meta := f.meta
		f.mu.Unlock()
		if meta == nil {
			f.t.Errorf("unexpected meta scan")
			return fakeReply{close: true}
		}
		return fakeReply{resp: meta(&sr)}
	case "Multi":
	default:
		f.t.Errorf("unexpected method %s", req.header.GetMethodName())
		return fakeReply{close: true}
	}
	var mr pb.MultiRequest
	mustUnmarshal(f.t, req.param, &mr)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, &mr)
	resp := &pb.MultiResponse{}
	for _, ra := range mr.GetRegionAction() {
		name := string(ra.GetRegion().GetValue())
		rar := &pb.RegionActionResult{}
		resp.RegionActionResult = append(resp.RegionActionResult, rar)
		if f.notServing[name] > 0 {
			rar.Exception = &pb.NameBytesPair{Name: proto.String(classNotServingRegion), Value: []byte(classNotServingRegion + ": " + name + " is not online")}
			continue
		}
		if c := ra.GetCondition(); c != nil {
			if len(ra.GetAction()) != 1 || !ra.GetAtomic() {
				f.t.Errorf("conditional region action with %d actions, atomic %v", len(ra.GetAction()), ra.GetAtomic())
			}
			mp := ra.GetAction()[0].GetMutation()
			_, exists := f.rows[string(c.GetRow())]
			ok := !exists
			if ok {
				f.apply(mp)
			}
			rar.Processed = proto.Bool(ok)
			rar.ResultOrException = []*pb.ResultOrException{{Index: proto.Uint32(0), Result: &pb.Result{}}}
			continue
		}
		for _, a := range ra.GetAction() {
			if g := a.GetGet(); g != nil {
				res := &pb.Result{}
				if v, ok := f.rows[string(g.GetRow())]; ok {
					res.Cell = []*pb.Cell{{Row: g.GetRow(), Family: tf, Qualifier: tq, Value: v}}
				}
				rar.ResultOrException = append(rar.ResultOrException, &pb.ResultOrException{Index: proto.Uint32(a.GetIndex()), Result: res})
				continue
			}
			res := f.apply(a.GetMutation())
			rar.ResultOrException = append(rar.ResultOrException, &pb.ResultOrException{Index: proto.Uint32(a.GetIndex()), Result: res})
		}
	}
	for k := range f.notServing {
		if f.notServing[k] > 0 {
			f.notServing[k]--
		}
	}
	if f.drop > 0 {
		f.drop--
		return fakeReply{close: true}
	}
	return fakeReply{resp: resp}
}

func (f *fakeRS) apply(mp *pb.MutationProto) *pb.Result {
	row := string(mp.GetRow())
	switch mp.GetMutateType() {
	case pb.MutationProto_PUT:
		f.rows[row] = mp.GetColumnValue()[0].GetQualifierValue()[0].GetValue()
		return &pb.Result{}
	case pb.MutationProto_INCREMENT:
		if n := mp.GetNonce(); n != 0 && f.nonces[n] {
			return &pb.Result{Cell: []*pb.Cell{{Row: mp.GetRow(), Value: binary.BigEndian.AppendUint64(nil, uint64(f.counters[row]))}}}
		} else if n != 0 {
			f.nonces[n] = true
		}
		f.counters[row] += int64(binary.BigEndian.Uint64(mp.GetColumnValue()[0].GetQualifierValue()[0].GetValue()))
		return &pb.Result{Cell: []*pb.Cell{{Row: mp.GetRow(), Value: binary.BigEndian.AppendUint64(nil, uint64(f.counters[row]))}}}
	}
	f.t.Errorf("unexpected mutation %v", mp.GetMutateType())
	return &pb.Result{}
}

func (f *fakeRS) reqs() []*pb.MultiRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.MultiRequest(nil), f.requests...)
}

var (
	tf = []byte("f")
	tq = []byte("q")
)

func tput(row string) *Put {
	return &Put{Row: []byte(row), Values: []Value{{tf, tq, []byte("v-" + row)}}}
}

func ifAbsent() *Condition { c := IfAbsent(tf, tq); return &c }

// TestMultiMutateGroupsByServer: actions on two servers' regions make one request per
// server; conditional actions are region actions of their own; results come in order.
func TestMultiMutateGroupsByServer(t *testing.T) {
	a, b := newFakeRS(t), newFakeRS(t)
	c := newUnitClient(t, a.addr(), nil)
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), EndKey: []byte("m"), Server: a.addr()})
	c.regions.add(&Region{Table: "t", Name: []byte("t,m,1"), StartKey: []byte("m"), Server: b.addr()})
	b.rows["x1"] = []byte("there")
	acts := []Action{
		{Mutation: tput("a1")},
		{Mutation: tput("x1"), Cond: ifAbsent()},
		{Mutation: tput("a2"), Cond: ifAbsent()},
		{Mutation: tput("x2")},
		{Mutation: tput("a3")},
		{Mutation: &Increment{Row: []byte("x3"), Deltas: []Delta{{tf, tq, 5}}}},
	}
	res, err := c.MultiMutate(context.Background(), "t", acts)
	if err != nil {
		t.Fatalf("MultiMutate: %v", err)
	}
	want := []bool{true, false, true, true, true, true}
	for i, r := range res {
		if r.Err != nil || r.Applied != want[i] || r.Resent {
			t.Errorf("result %d = %+v, want applied %v", i, r, want[i])
		}
	}
	if v, _ := Int64(res[5].Cells[0].Value); v != 5 {
		t.Errorf("increment result %v", res[5].Cells)
	}
	if string(b.rows["x1"]) != "there" || string(a.rows["a2"]) != "v-a2" || string(a.rows["a1"]) != "v-a1" {
		t.Errorf("rows a %v, b %v", a.rows, b.rows)
	}
	ra, rb := a.reqs(), b.reqs()
	if len(ra) != 1 || len(rb) != 1 {
		t.Fatalf("requests: %d to a, %d to b; want 1 each: %v", len(ra), len(rb), ra)
	}
	// a: the conditional a2 alone, then a1 and a3 in one non-atomic region action.
	if n := len(ra[0].GetRegionAction()); n != 2 {
		t.Fatalf("a got %d region actions, want 2: %v", n, ra[0])
	}
	if rb[0].GetNonceGroup() != c.nonceGroup {
		t.Errorf("nonce group %d, want %d", rb[0].GetNonceGroup(), c.nonceGroup)
	}
}

// TestMultiMutateRelocatesRefusedRegion: a region refused with NotServingRegion is
// located again and only its actions are sent again.
func TestMultiMutateRelocatesRefusedRegion(t *testing.T) {
	a := newFakeRS(t)
	b := newFakeRS(t)
	c := newUnitClient(t, a.addr(), nil)
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), EndKey: []byte("m"), Server: a.addr()})
	c.regions.add(&Region{Table: "t", Name: []byte("t,m,1"), StartKey: []byte("m"), Server: a.addr()})
	a.notServing["t,m,1"] = 1 << 30 // moved to b for good
	var scans int
	a.meta = func(sr *pb.ScanRequest) *pb.ScanResponse {
		scans++
		return &pb.ScanResponse{Results: []*pb.Result{metaRow("t,m,2", "m", "", b.addr())}, MoreResults: proto.Bool(false)}
	}
	acts := []Action{{Mutation: tput("a1")}, {Mutation: tput("x1")}, {Mutation: tput("x2"), Cond: ifAbsent()}, {Mutation: tput("a2"), Cond: ifAbsent()}}
	res, err := c.MultiMutate(context.Background(), "t", acts)
	if err != nil {
		t.Fatalf("MultiMutate: %v (%+v)", err, res)
	}
	for i, r := range res {
		if !r.Applied || r.Err != nil {
			t.Errorf("result %d = %+v", i, r)
		}
	}
	if len(b.rows) != 2 || len(a.rows) != 2 {
		t.Fatalf("rows a %v, b %v", a.rows, b.rows)
	}
	// a got one request (all four); b one with the two refused actions.
	ra, rb := a.reqs(), b.reqs()
	if len(ra) != 1 || len(rb) != 1 || len(rb[0].GetRegionAction()) != 2 {
		t.Fatalf("requests a %d, b %d: %v", len(ra), len(rb), rb)
	}
	for _, x := range rb[0].GetRegionAction() {
		if string(x.GetRegion().GetValue()) != "t,m,2" {
			t.Errorf("retry went to region %q", x.GetRegion().GetValue())
		}
	}
	if scans != 1 {
		t.Errorf("%d meta scans, want 1", scans)
	}
}

// TestMultiMutateInDoubt: a request whose reply is lost: its conditional Put is not
// sent again and reports an "outcome unknown" Connection error; its Puts and its
// Increment (same nonce) are sent again and succeed.
func TestMultiMutateInDoubt(t *testing.T) {
	a := newFakeRS(t)
	c := newUnitClient(t, a.addr(), nil)
	a.meta = func(sr *pb.ScanRequest) *pb.ScanResponse {
		return &pb.ScanResponse{Results: []*pb.Result{metaRow("t,,1", "", "", a.addr())}, MoreResults: proto.Bool(false)}
	}
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: a.addr()})
	a.drop = 1
	acts := []Action{
		{Mutation: tput("p1")},
		{Mutation: tput("c1"), Cond: ifAbsent()},
		{Mutation: &Increment{Row: []byte("n1"), Deltas: []Delta{{tf, tq, 1}}}},
	}
	res, err := c.MultiMutate(context.Background(), "t", acts)
	if dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("MultiMutate error = %v, want the conditional action's Connection error", err)
	}
	if res[0].Err != nil || !res[0].Applied || res[2].Err != nil || !res[2].Applied || !res[0].Resent || !res[2].Resent {
		t.Fatalf("idempotent actions: %+v", res)
	}
	if dcsync.CodeOf(res[1].Err) != dcsync.Connection || res[1].Applied {
		t.Fatalf("conditional action in doubt: %+v", res[1])
	}
	if v, _ := Int64(res[2].Cells[0].Value); v != 1 || a.counters["n1"] != 1 {
		t.Fatalf("increment applied as %d (counter %d), want once", v, a.counters["n1"])
	}
	reqs := a.reqs()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	// The retry carries the Put and the Increment, with the same nonce, not the
	// conditional Put.
	var n1, n2 uint64
	for _, ra := range reqs[0].GetRegionAction() {
		for _, x := range ra.GetAction() {
			if x.GetMutation().GetMutateType() == pb.MutationProto_INCREMENT {
				n1 = x.GetMutation().GetNonce()
			}
		}
	}
	count := 0
	for _, ra := range reqs[1].GetRegionAction() {
		if ra.GetCondition() != nil {
			t.Errorf("conditional action sent again")
		}
		for _, x := range ra.GetAction() {
			count++
			if x.GetMutation().GetMutateType() == pb.MutationProto_INCREMENT {
				n2 = x.GetMutation().GetNonce()
			}
		}
	}
	if count != 2 || n1 == 0 || n1 != n2 {
		t.Fatalf("retry: %d actions, nonces %d then %d", count, n1, n2)
	}
}

// TestMultiMutateRetriesExhausted: a region refused every time ends its actions with
// RetriesExhausted (not applied); the other region's actions succeed.
func TestMultiMutateRetriesExhausted(t *testing.T) {
	a := newFakeRS(t)
	c := newUnitClient(t, a.addr(), func(cfg *Config) { cfg.MaxAttempts = 3 })
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), EndKey: []byte("m"), Server: a.addr()})
	c.regions.add(&Region{Table: "t", Name: []byte("t,m,1"), StartKey: []byte("m"), Server: a.addr()})
	a.notServing["t,m,1"] = 1 << 30
	a.meta = func(sr *pb.ScanRequest) *pb.ScanResponse {
		return &pb.ScanResponse{Results: []*pb.Result{metaRow("t,m,1", "m", "", a.addr())}, MoreResults: proto.Bool(false)}
	}
	res, err := c.MultiMutate(context.Background(), "t", []Action{{Mutation: tput("a")}, {Mutation: tput("x"), Cond: ifAbsent()}})
	if dcsync.CodeOf(err) != dcsync.RetriesExhausted {
		t.Fatalf("error %v", err)
	}
	if res[0].Err != nil || !res[0].Applied || dcsync.CodeOf(res[1].Err) != dcsync.RetriesExhausted {
		t.Fatalf("results %+v", res)
	}
	if n := len(a.reqs()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

// TestMultiMutateSplitsLargeBatches: more actions than one request may carry go in
// several requests.
func TestMultiMutateSplitsLargeBatches(t *testing.T) {
	a := newFakeRS(t)
	c := newUnitClient(t, a.addr(), nil)
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), Server: a.addr()})
	n := 2*maxMultiActions + 10
	acts := make([]Action, n)
	for i := range acts {
		acts[i] = Action{Mutation: tput(fmt.Sprintf("r%05d", i))}
		if i%3 == 0 {
			acts[i].Cond = ifAbsent()
		}
	}
	res, err := c.MultiMutate(context.Background(), "t", acts)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Applied {
			t.Fatalf("action %d not applied", i)
		}
	}
	reqs := a.reqs()
	if len(reqs) != 3 || len(a.rows) != n {
		t.Fatalf("%d requests, %d rows", len(reqs), len(a.rows))
	}
}

func TestMultiMutateBadInput(t *testing.T) {
	c := newUnitClient(t, "127.0.0.1:1", nil)
	ctx := context.Background()
	bad := Condition{}
	for _, acts := range [][]Action{
		{{}},
		{{Mutation: &Put{Values: []Value{{tf, tq, nil}}}}},
		{{Mutation: &Put{Row: []byte("r")}}},
		{{Mutation: tput("r"), Cond: &bad}},
	} {
		res, err := c.MultiMutate(ctx, "t", acts)
		if dcsync.CodeOf(err) != dcsync.InvalidArgument || res != nil {
			t.Errorf("%+v: %v, %v", acts, res, err)
		}
	}
	if _, err := c.MultiMutate(ctx, "", []Action{{Mutation: tput("r")}}); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Errorf("empty table: %v", err)
	}
	if res, err := c.MultiMutate(ctx, "t", nil); err != nil || len(res) != 0 {
		t.Errorf("no actions: %v, %v", res, err)
	}
}

// TestMultiMutateReadBack: an action's read-back comes in a region action after the
// mutations of its region, in the same request, and sees them.
func TestMultiMutateReadBack(t *testing.T) {
	a := newFakeRS(t)
	c := newUnitClient(t, a.addr(), nil)
	c.regions.add(&Region{Table: "t", Name: []byte("t,,1"), EndKey: []byte("m"), Server: a.addr()})
	c.regions.add(&Region{Table: "t", Name: []byte("t,m,1"), StartKey: []byte("m"), Server: a.addr()})
	cols := []Column{{tf, tq}}
	acts := []Action{
		{Mutation: tput("a1"), Read: cols},
		{Mutation: tput("x1"), Read: cols},
		{Mutation: tput("a2")},
		{Mutation: tput("x2"), Cond: ifAbsent()},
	}
	res, err := c.MultiMutate(context.Background(), "t", acts)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		wantRead := i < 2
		if !r.Applied || (len(r.Read) == 1) != wantRead || wantRead && string(r.Read[0].Value) != "v-"+string(acts[i].Mutation.mutationRow()) {
			t.Fatalf("result %d = %+v", i, r)
		}
	}
	reqs := a.reqs()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	// Per region: the plain mutations, then their reads (the conditional one apart).
	var kinds []string
	for _, ra := range reqs[0].GetRegionAction() {
		k := "put"
		switch {
		case ra.GetCondition() != nil:
			k = "cond"
		case ra.GetAction()[0].GetGet() != nil:
			k = "get"
		}
		kinds = append(kinds, string(ra.GetRegion().GetValue())+":"+k)
	}
	if fmt.Sprint(kinds) != "[t,,1:put t,,1:get t,m,1:put t,m,1:cond t,m,1:get]" {
		t.Fatalf("region actions %v", kinds)
	}
	for _, bad := range []Action{
		{Mutation: tput("r"), Cond: ifAbsent(), Read: cols},
		{Mutation: &Increment{Row: []byte("r"), Deltas: []Delta{{tf, tq, 1}}}, Read: cols},
	} {
		if _, err := c.MultiMutate(context.Background(), "t", []Action{bad}); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
