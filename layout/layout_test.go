package layout

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

func TestPrefixGoldenVectors(t *testing.T) {
	f, err := os.Open("testdata/hbase-rowkey-prefix-vectors.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 {
			t.Fatalf("bad vector line %q", line)
		}
		want, err := strconv.Atoi(cols[2])
		if err != nil {
			t.Fatal(err)
		}
		if got := Prefix([]byte(cols[0])); int(got) != want {
			t.Errorf("Prefix(%q) = %d, want %d (java hash %s)", cols[0], got, want, cols[1])
		}
		n++
	}
	if n < 10 {
		t.Fatalf("read only %d vectors", n)
	}
}

func TestPrefixMinInt32(t *testing.T) {
	// Math.abs(Integer.MIN_VALUE) stays negative in Java; mod 256 then gives 0.
	// Find nothing by search; check the arithmetic path directly.
	h := int32(-1 << 31)
	if byte(int64(h)%256) != 0 {
		t.Fatal("MinInt32 must map to prefix 0")
	}
}

func TestLayoutsMatchJava(t *testing.T) {
	k := dcsync.Key{Level: dcsync.DC, Client: "orders", Farm: "dc1", Name: "lock1"}
	if got := string(HBaseLockRow(k)[1:]); got != "DC#dc1#orders#lock1" {
		t.Errorf("DC lock row = %q", got)
	}
	k.Level = dcsync.XDC
	if got := string(HBaseLockRow(k)[1:]); got != "XDC#orders#lock1" {
		t.Errorf("XDC lock row = %q", got)
	}
	if row := HBaseLatchRow("client", "latch"); row[0] != 175 || string(row[1:]) != "client_latch" {
		t.Errorf("latch row = %v", row)
	}
	if got := AerospikeLatchKey("c", "l"); got != "D_LTCH#c#l" {
		t.Errorf("aerospike latch key = %q", got)
	}
	if got := AerospikeLockSet(dcsync.DC, "phx", "dlm"); got != "DC#phx#dlm" {
		t.Errorf("aerospike DC lock set = %q", got)
	}
	if got := AerospikeLockSet(dcsync.XDC, "phx", "dlm"); got != "XDC#dlm" {
		t.Errorf("aerospike XDC lock set = %q", got)
	}
	if len(SplitKeys()) != 256 || SplitKeys()[255][0] != 0xFF {
		t.Error("split keys must be 0x00..0xFF")
	}
}

func TestCheckAerospikeKey(t *testing.T) {
	ok := dcsync.Key{Level: dcsync.DC, Client: "c", Farm: "dc1", Name: "n"}
	if err := CheckAerospikeKey(ok, "s", "s"); err != nil {
		t.Fatal(err)
	}
	long := ok
	long.Farm = "farm-too-long" // "farm-too-long##data" is 19 bytes
	if err := CheckAerospikeKey(long, "s", "s"); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("long farm: %v", err)
	}
	if err := CheckAerospikeKey(ok, strings.Repeat("s", 60), "s"); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("long set: %v", err)
	}
}

// FuzzLayout checks, for every valid (level, client, farm, name): each Java key parses
// back to the ids that built it unless its Ambiguous* function says another triple
// shares it, and then another triple really does; farm cells and bins always round-trip;
// and IdentityKey always round-trips, so dcsync-only keys never collide.
func FuzzLayout(f *testing.F) {
	f.Add(uint8(1), "a_b", "dc1", "c")
	f.Add(uint8(2), "a", "dc1", "b_c")
	f.Add(uint8(1), "orders", "phx", "x#y")
	f.Add(uint8(1), "a#b", "d#c", "x#y")
	f.Add(uint8(2), "svc-payments", "dc.2", "日本_ラッチ")
	f.Add(uint8(2), "CLIENT_ID", "dc_1", "latch")
	f.Fuzz(func(t *testing.T, lv uint8, client, farm, name string) {
		k := dcsync.Key{Level: dcsync.Level(lv%2 + 1), Client: client, Farm: farm, Name: name}
		if driver.ValidateKey("fuzz", k) != nil {
			return
		}
		c, l, ok := ParseHBaseLatchRow(HBaseLatchRow(client, name))
		if !AmbiguousHBaseLatchRow(client, name) && (!ok || c != client || l != name) {
			t.Fatalf("hbase latch row round trip: %q %q -> %q %q %v", client, name, c, l, ok)
		}
		if fm, ok := ParseHBaseLatchQualifier(HBaseLatchQualifier(farm)); !ok || fm != farm {
			t.Fatalf("hbase latch qualifier round trip: %q -> %q", farm, fm)
		}
		want := k
		if k.Level == dcsync.XDC {
			want.Farm = ""
		}
		if got, ok := ParseHBaseLockRow(HBaseLockRow(k)); !AmbiguousLockKey(k) && (!ok || got != want) {
			t.Fatalf("hbase lock row round trip: %+v -> %+v %v", want, got, ok)
		}
		if c, l, ok := ParseAerospikeLatchKey(AerospikeLatchKey(client, name)); !AmbiguousAerospikeLatchKey(client, name) && (!ok || c != client || l != name) {
			t.Fatalf("aerospike latch key round trip: %q %q -> %q %q", client, name, c, l)
		}
		if fm, ok := ParseAerospikeLatchBin(AerospikeLatchBin(farm)); !ok || fm != farm {
			t.Fatalf("aerospike bin round trip: %q -> %q", farm, fm)
		}
		if c, l, ok := ParseAerospikeLockKey(AerospikeLockKey(client, name)); !AmbiguousLockKey(k) && (!ok || c != client || l != name) {
			t.Fatalf("aerospike lock key round trip: %q %q -> %q %q", client, name, c, l)
		}
		if got, ok := ParseIdentityKey(IdentityKey(k)); !ok || got != want {
			t.Fatalf("identity key round trip: %+v -> %q -> %+v %v", want, IdentityKey(k), got, ok)
		}
	})
}

func TestAmbiguity(t *testing.T) {
	// The Java layouts' known collisions are reported, and identity keys tell them apart.
	if !bytes.Equal(HBaseLatchRow("a_b", "c"), HBaseLatchRow("a", "b_c")) {
		t.Fatal("the Java HBase latch rows of (a_b, c) and (a, b_c) should be equal")
	}
	if !AmbiguousHBaseLatchRow("a_b", "c") || !AmbiguousHBaseLatchRow("a", "b_c") || AmbiguousHBaseLatchRow("a", "bc") {
		t.Fatal("AmbiguousHBaseLatchRow")
	}
	if AerospikeLatchKey("a#b", "c") != AerospikeLatchKey("a", "b#c") || !AmbiguousAerospikeLatchKey("a#b", "c") || !AmbiguousAerospikeLatchKey("a", "b#c") || AmbiguousAerospikeLatchKey("a_b", "c") {
		t.Fatal("AmbiguousAerospikeLatchKey")
	}
	k1 := dcsync.Key{Level: dcsync.DC, Farm: "d#1", Client: "c", Name: "n"}
	k2 := dcsync.Key{Level: dcsync.DC, Farm: "d", Client: "1#c", Name: "n"}
	if !bytes.Equal(HBaseLockRow(k1), HBaseLockRow(k2)) || !AmbiguousLockKey(k1) || !AmbiguousLockKey(k2) {
		t.Fatal("AmbiguousLockKey")
	}
	if IdentityKey(k1) == IdentityKey(k2) {
		t.Fatal("identity keys collide")
	}
	if got := IdentityKey(dcsync.Key{Level: dcsync.DC, Farm: "dc1", Client: "orders", Name: "batch-1"}); got != "DC:3:dc16:orders7:batch-1" {
		t.Fatalf("IdentityKey = %q", got)
	}
}
