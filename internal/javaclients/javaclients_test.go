package javaclients

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync/layout"
)

func ms(n int64) int64 { return n * int64(time.Millisecond) }

func TestOverlaps(t *testing.T) {
	ivs := []Interval{
		{Kind: KindDcsync, Worker: "d0", Start: ms(0), End: ms(10)},
		{Kind: KindDcsync, Worker: "d1", Start: ms(10), End: ms(20)}, // touches d0: no overlap
		{Kind: KindJava, Worker: "j0", Start: ms(15), End: ms(30)},   // overlaps d1
		{Kind: KindJava, Worker: "j1", Start: ms(25), End: ms(26)},   // overlaps j0
		{Kind: KindDcsync, Worker: "d2", Start: ms(40), End: ms(50)},
		{Kind: KindDcsync, Worker: "d3", Start: ms(45), End: ms(46)}, // overlaps d2
	}
	r := Overlaps(ivs)
	if r.Total() != 6 || r.Acquisitions[KindDcsync] != 4 || r.Acquisitions[KindJava] != 2 {
		t.Fatalf("acquisitions %v", r.Acquisitions)
	}
	want := map[string]int{"dcsync/java": 1, "java/java": 1, "dcsync/dcsync": 1}
	for k, v := range want {
		if r.Pairs[k] != v {
			t.Errorf("pairs %s = %d, want %d (%v)", k, r.Pairs[k], v, r.Pairs)
		}
	}
	if r.Overlapping != 5 {
		t.Errorf("overlapping holds = %d, want 5 (all but d0)", r.Overlapping)
	}
	if r.Holders["dcsync/java"] != 2 || r.Holders["java/java"] != 2 || r.Holders["dcsync/dcsync"] != 2 {
		t.Errorf("holders %v", r.Holders)
	}
}

func TestDcsyncChecks(t *testing.T) {
	h := func(w string, start, end int64, token uint64, lost bool) Hold {
		return Hold{Interval: Interval{Kind: KindDcsync, Worker: w, Start: ms(start), End: ms(end)}, Token: token, Lost: lost}
	}
	ok := []Hold{h("a", 0, 10, 1, false), h("b", 5, 15, 2, true), h("c", 20, 30, 3, false)}
	if v := UnexplainedDcsyncOverlaps(ok); len(v) != 0 {
		t.Errorf("an overlap with a LockLost release is explained: %v", v)
	}
	if v := TokenOrderViolations(ok); len(v) != 0 {
		t.Errorf("tokens increase: %v", v)
	}
	lost := []Hold{h("a", 0, 10, 5, false), h("b", 20, 30, 4, true)}
	if v := TokenOrderViolations(lost); len(v) != 0 {
		t.Errorf("a hold whose lock was taken away may carry an older token: %v", v)
	}
	bad := []Hold{h("a", 0, 10, 5, false), h("b", 5, 15, 6, false), h("c", 20, 30, 4, false)}
	if v := UnexplainedDcsyncOverlaps(bad); len(v) != 1 {
		t.Errorf("unexplained overlaps = %v, want a/b", v)
	}
	if v := TokenOrderViolations(bad); len(v) != 1 {
		t.Errorf("token violations = %v, want c after b", v)
	}
}

func TestHiddenJavaPuts(t *testing.T) {
	d := Hold{Interval: Interval{Kind: KindDcsync, Worker: "d", Start: ms(1000), End: ms(1005)}}
	taker := Hold{Interval: Interval{Kind: KindDcsync, Worker: "d2", Start: ms(1008), End: ms(1012)}}
	stale := Hold{Interval: Interval{Kind: KindJava, Worker: "j", Start: ms(1006), End: ms(1011), PutTS: 1000}}
	fresh := stale
	fresh.PutTS = 1005
	s, u := HiddenJavaPuts([]Hold{d, stale, taker})
	if len(s) != 1 || len(u) != 0 {
		t.Errorf("Put stamped at the preceding dcsync start: stale %v, unexplained %v", s, u)
	}
	s, u = HiddenJavaPuts([]Hold{d, fresh, taker})
	if len(s) != 0 || len(u) != 1 {
		t.Errorf("Put stamped after the preceding dcsync start: stale %v, unexplained %v", s, u)
	}
	s, u = HiddenJavaPuts([]Hold{d, fresh})
	if len(s)+len(u) != 0 {
		t.Errorf("a Java hold nobody took over is not hidden: %v %v", s, u)
	}
}

// TestTool starts the Java tool with no servers and checks what needs none: the request
// protocol, and that its OneByteSimpleHash row keys are dcsync's (the golden vectors, and
// random keys against layout.Salt).
func TestTool(t *testing.T) {
	tool := Require(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := tool.Call(ctx, "ping", nil); err != nil || string(res) != `"pong"` {
		t.Fatalf("ping = %s, %v", res, err)
	}
	_, err := tool.Call(ctx, "no.such.op", nil)
	if je, ok := err.(*Error); !ok || je.Code != "IllegalArgumentException" {
		t.Fatalf("unknown op: %v", err)
	}
	keys := []string{"", "a", "client_latch", "DC#dc1#CLIENT_ID#lock", "XDC#MY_SERVICE#x", "ü_ñ", "日本_ラッチ", "a b#c_d"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(0x20 + rng.IntN(0x5f))
		}
		keys = append(keys, string(b))
	}
	for _, k := range keys {
		res, err := tool.Call(ctx, "raw.hbase.rowkey", map[string]any{"key": k})
		if err != nil {
			t.Fatal(err)
		}
		if want := `"` + hex.EncodeToString(layout.Salt(k)) + `"`; string(res) != want {
			t.Fatalf("row key of %q: Java %s, dcsync %s", k, res, want)
		}
	}
	root, err := FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(root, "testenv", "javaclients", "javaclients"), "selftest-prefix",
		filepath.Join(root, "layout", "testdata", "hbase-rowkey-prefix-vectors.tsv")).Output()
	if err != nil || !strings.HasPrefix(string(out), "ok ") {
		t.Fatalf("selftest-prefix: %s, %v", out, err)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
