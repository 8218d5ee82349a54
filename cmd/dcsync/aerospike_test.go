package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// aerospikeServer returns the real Aerospike server ($DCSYNC_AEROSPIKE) and namespace
// ($DCSYNC_AEROSPIKE_NAMESPACE, default "test"). Unset: a failure with CI=true, a skip
// otherwise (store/aerospike's tests have the same rule).
func aerospikeServer(t *testing.T) (addr, ns string) {
	t.Helper()
	if addr = os.Getenv("DCSYNC_AEROSPIKE"); addr == "" {
		const msg = "DCSYNC_AEROSPIKE is not set: start a real Aerospike server with " +
			"`DCSYNC_ASD=/path/to/asd testenv/aerospike/up` and export the DCSYNC_AEROSPIKE it prints"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " [CI=true: failing]")
		}
		t.Skip(msg)
	}
	if ns = os.Getenv("DCSYNC_AEROSPIKE_NAMESPACE"); ns == "" {
		ns = "test"
	}
	return addr, ns
}

// TestAerospikeStoreURL runs the CLI flow against the real Aerospike server, in sets of
// its own (the server is shared and long-lived).
func TestAerospikeStoreURL(t *testing.T) {
	addr, ns := aerospikeServer(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := "cli" + hex.EncodeToString(b[:])
	c := &cli{t: t, store: "aerospike://" + addr + "/" + ns + "?lock_set_suffix=" + suffix + "&latch_set_suffix=" + suffix}
	out := c.want(0, "lock", "acquire", "job", "--ttl", "1m")
	if ownerRE.FindStringSubmatch(out) == nil {
		t.Fatalf("acquire printed %q", out)
	}
	c.want(3, "lock", "acquire", "job")
	if st := c.want(0, "lock", "status", "job"); !strings.HasPrefix(st, "held owner=") {
		t.Fatalf("status printed %q", st)
	}
	lockErrorsInUsersWords(t, c, "words")
	c.want(0, "latch", "create", "batch", "--count", "2")
	c.want(1, "latch", "create", "batch", "--count", "2")
	c.want(0, "latch", "countdown", "batch")
	if n := c.want(0, "latch", "countdown", "batch"); n != "0\n" {
		t.Fatalf("countdown printed %q", n)
	}
	c.want(0, "latch", "await", "batch", "--timeout", "10s")

	// XDC: counts from two farms sum; count-up and count-down print the sum.
	c.want(0, "latch", "create", "x", "--count", "3", "--level", "xdc")
	if n := c.want(0, "--farm", "dc2", "latch", "countdown", "x", "--level", "xdc"); n != "2\n" {
		t.Fatalf("XDC countdown from dc2 printed %q", n)
	}
	if n := c.want(0, "--farm", "dc2", "latch", "countup", "x", "--level", "xdc"); n != "3\n" {
		t.Fatalf("XDC countup from dc2 printed %q", n)
	}
	if n := c.want(0, "latch", "count", "x", "--level", "xdc"); n != "3\n" {
		t.Fatalf("XDC count printed %q", n)
	}
	c.want(1, "latch", "countdown", "missing", "--level", "xdc")
	c.want(2, "--farm", "farm-too-long", "latch", "count", "batch")
}
