package main

import (
	"strings"
	"testing"

	"github.com/dcsync/dcsync/internal/aerotest"
)

// TestAerospikeStoreURL runs the CLI flow against the in-process Aerospike server.
func TestAerospikeStoreURL(t *testing.T) {
	srv, err := aerotest.Start(aerotest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := &cli{t: t, store: "aerospike://" + srv.Addr() + "/test?lock_set_suffix=cli&latch_set_suffix=cli"}
	out := c.want(0, "lock", "acquire", "job", "--ttl", "1m")
	if ownerRE.FindStringSubmatch(out) == nil {
		t.Fatalf("acquire printed %q", out)
	}
	c.want(3, "lock", "acquire", "job")
	if st := c.want(0, "lock", "status", "job"); !strings.HasPrefix(st, "held owner=") {
		t.Fatalf("status printed %q", st)
	}
	c.want(0, "latch", "create", "batch", "--count", "2")
	c.want(1, "latch", "create", "batch", "--count", "2")
	c.want(0, "latch", "countdown", "batch")
	if n := c.want(0, "latch", "countdown", "batch"); n != "0\n" {
		t.Fatalf("countdown printed %q", n)
	}
	c.want(0, "latch", "await", "batch", "--timeout", "10s")
	c.want(2, "--farm", "farm-too-long", "latch", "count", "batch")
}
