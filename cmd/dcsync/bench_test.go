package main

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

// checkBench runs 'bench --json' against c's store and checks what it reports: every
// operation measured at least twice, each raw operation named and timed, a ratio for
// each, and nothing of the run's latches or locks left behind.
func checkBench(t *testing.T, c *cli) {
	t.Helper()
	out := c.want(0, "bench", "--duration", "600ms", "--poll", "5ms", "--json")
	var rs []benchResult
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	want := []string{"lock acquire+release", "latch count-down", "latch count", "await wake-up"}
	if len(rs) != len(want) {
		t.Fatalf("bench reported %d operations, want %d: %s", len(rs), len(want), out)
	}
	for i, r := range rs {
		if r.Op != want[i] || r.N < 2 || r.P50NS <= 0 || r.P99NS < r.P50NS {
			t.Errorf("result %d: %+v, want op %q with n >= 2 and 0 < p50 <= p99", i, r, want[i])
		}
		if r.Op != "await wake-up" && (r.Raw == "" || r.RawP50NS <= 0 || r.RatioP50 <= 0) {
			t.Errorf("%s: no raw figure: %+v", r.Op, r)
		}
	}
	// Cleaned up: no latch or lock of the bench's client (c's) is left.
	for _, args := range [][]string{{"latch", "list", "--json"}, {"lock", "list", "--json"}} {
		out, errs, code := c.run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		if s := strings.TrimSpace(out); s != "[]" && s != "null" {
			t.Errorf("bench left behind (%v): %s", args, s)
		}
	}
}

func TestBenchSQLite(t *testing.T) {
	c := newCLI(t)
	checkBench(t, c)
	// The raw rows of the baseline are gone too.
	db, err := sql.Open("sqlite", strings.TrimPrefix(c.store, "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"dcsync_locks", "dcsync_latch_cells"} {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM ` + table + ` WHERE client LIKE 'dcsync-bench%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s: %d rows of the bench left", table, n)
		}
	}
}

func TestBenchMemory(t *testing.T) { checkBench(t, &cli{t: t, store: "memory:"}) }

func TestBenchAerospike(t *testing.T) {
	addr, ns := aerospikeServer(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := "bench" + hex.EncodeToString(b[:])
	checkBench(t, &cli{t: t, store: "aerospike://" + addr + "/" + ns + "?lock_set_suffix=" + suffix + "&latch_set_suffix=" + suffix})
}

func TestBenchHBase(t *testing.T) { checkBench(t, hbaseCLI(t, "bench")) }

func TestBenchUsage(t *testing.T) {
	c := newCLI(t)
	c.want(exitUsage, "bench", "--duration", "0s")
	c.want(exitUsage, "bench", "--poll", "0s")
	c.want(exitUsage, "bench", "extra")
}
