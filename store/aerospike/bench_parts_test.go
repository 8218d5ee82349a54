package aerospike

import (
	"context"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/layout"
)

// BenchmarkCountDownParts splits the cost of a DC count-down on the real server
// ($DCSYNC_AEROSPIKE) into its parts: each variant is one operate whose filter and ops
// are built before the clock starts, so it measures the command on the wire and on the
// server, and all run interleaved with the raw add (AerospikeLatchStorage.java:146-155)
// in one loop. Each reports its median as a multiple of the raw add's (-x). build-x is
// the client's cost of building dcsync's filter and ops, store-x the whole AddLatch.
// docs/benchmarks-aerospike.md reads the figures: the floor of an exactly-once,
// TTL-checked count-down.
func BenchmarkCountDownParts(b *testing.B) {
	addr := os.Getenv("DCSYNC_AEROSPIKE")
	if addr == "" {
		b.Skip("DCSYNC_AEROSPIKE is not set")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		b.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	c, err := as.NewClient(host, p)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := New(c, Config{Namespace: "test"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	name := "parts-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	k := dcsync.Key{Level: dcsync.DC, Client: "bench", Farm: "dc1", Name: name}
	if err := s.CreateLatch(ctx, k, 1<<40, time.Hour); err != nil {
		b.Fatal(err)
	}
	key, _ := s.latchKey(k)
	rawKey, _ := as.NewKey("test", s.latchSet, layout.AerospikeLatchKey("bench", "raw-"+name))
	if err := c.Put(as.NewWritePolicy(0, 3600), rawKey, as.BinMap{"count#dc1": 1 << 40}); err != nil {
		b.Fatal(err)
	}
	end, _ := s.incs.get(incKey(k))
	bin := layout.AerospikeLatchBin(k.Farm)
	policy := func(filter *as.Expression) *as.WritePolicy {
		wp := s.writePolicy(ctx, as.TTLDontUpdate)
		wp.RecordExistsAction = as.UPDATE_ONLY
		wp.FilterExpression = filter
		return wp
	}
	inRange := func() *as.Expression { return as.ExpGreaterEq(as.ExpIntBin(bin), as.ExpIntVal(math.MinInt64+1)) }
	add := func() []*as.Operation { return []*as.Operation{as.AddOp(as.NewBin(bin, -1)), as.GetBinOp(bin)} }
	dcsyncFilter := func(id opID) *as.Expression {
		return as.ExpAnd(identityOK(latchIdentity(k)), dcUpdateAlive(k.Farm, bin, end), inRange(), as.ExpNot(applied(id)))
	}
	variants := []struct {
		name  string
		build func(id opID) (*as.WritePolicy, []*as.Operation)
	}{
		{"add", func(opID) (*as.WritePolicy, []*as.Operation) { return policy(nil), add() }},
		{"identity", func(opID) (*as.WritePolicy, []*as.Operation) {
			return policy(identityOK(latchIdentity(k))), add()
		}},
		{"alive", func(opID) (*as.WritePolicy, []*as.Operation) { return policy(dcUpdateAlive(k.Farm, bin, end)), add() }},
		{"applied", func(id opID) (*as.WritePolicy, []*as.Operation) { return policy(as.ExpNot(applied(id))), add() }},
		{"filter", func(id opID) (*as.WritePolicy, []*as.Operation) { return policy(dcsyncFilter(id)), add() }},
		{"record", func(id opID) (*as.WritePolicy, []*as.Operation) {
			return policy(nil), append([]*as.Operation{s.recordOp(id)}, add()...)
		}},
		{"dcsync", func(id opID) (*as.WritePolicy, []*as.Operation) {
			return policy(dcsyncFilter(id)), append([]*as.Operation{s.recordOp(id)}, add()...)
		}},
	}
	raw := as.NewWritePolicy(0, 60)
	raw.RecordExistsAction = as.UPDATE_ONLY
	var lraw, lbuild, lstore []time.Duration
	lv := make([][]time.Duration, len(variants))
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Operate(raw, rawKey, as.AddOp(as.NewBin("count#dc1", -1))); err != nil {
			b.Fatal(err)
		}
		lraw = append(lraw, time.Since(t0))
		for j, v := range variants {
			id := s.writers.acquire()
			t0 := time.Now()
			wp, ops := v.build(id)
			t1 := time.Now()
			if _, err := c.Operate(wp, key, ops...); err != nil {
				b.Fatal(v.name, err)
			}
			lv[j] = append(lv[j], time.Since(t1))
			if v.name == "dcsync" {
				lbuild = append(lbuild, t1.Sub(t0))
			}
			s.writers.release(id)
		}
		t0 = time.Now()
		if _, err := s.AddLatch(ctx, k, -1); err != nil {
			b.Fatal(err)
		}
		lstore = append(lstore, time.Since(t0))
	}
	med := func(l []time.Duration) float64 {
		l = slices.Clone(l)
		slices.Sort(l)
		return float64(l[len(l)/2])
	}
	r := med(lraw)
	for j, v := range variants {
		b.ReportMetric(med(lv[j])/r, v.name+"-x")
	}
	b.ReportMetric(med(lbuild)/r, "build-x")
	b.ReportMetric(med(lstore)/r, "store-x")
}
