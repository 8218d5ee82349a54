package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// benchRun is what a test learns of a 'bench' run: its queue (named "bench-<run id>",
// also the prefix of its baseline) and how many batches it may have written.
type benchRun struct {
	queue   string
	batches int
}

// checkBench runs 'bench --json' against c's store and checks what it reports: every
// operation measured at least twice, each raw operation named and timed, a ratio for
// each, and nothing of the run's latches, locks or queue left behind (the callers
// check the store's raw rows or records).
func checkBench(t *testing.T, c *cli) benchRun {
	t.Helper()
	out := c.want(0, "bench", "--duration", "900ms", "--poll", "5ms", "--json")
	var rs []benchResult
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	want := []string{"lock acquire+release", "election campaign+resign", "semaphore acquire+release",
		"rwlock read+release", "rwlock write+release", "latch count-down", "latch count",
		fmt.Sprintf("enqueue (%d events)", benchBatch), fmt.Sprintf("receive+ack (%d events)", benchBatch), "await wake-up"}
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
	var run benchRun
	for _, r := range rs {
		if strings.HasPrefix(r.Op, "enqueue") || strings.HasPrefix(r.Op, "receive") {
			run.batches += r.N + 2
			f := strings.Fields(r.Note)
			if len(f) < 2 || f[0] != "queue" {
				t.Fatalf("%s: the note names no queue: %q", r.Op, r.Note)
			}
			run.queue = strings.TrimSuffix(f[1], ",")
		}
	}
	// The queue is gone.
	if _, errs, code := c.run("queue", "lag", run.queue); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("queue lag %s after bench: exit %d, %s; want a not-found error", run.queue, code, errs)
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
	return run
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
	// The file had no queue but the bench's, nor the baseline's rows: every queue
	// table is empty.
	for _, table := range []string{"dcsync_queues", "dcsync_queue_entries", "dcsync_queue_heads", "dcsync_queue_offsets", "dcsync_queue_dedup"} {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
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
	run := checkBench(t, &cli{t: t, store: "aerospike://" + addr + "/" + ns + "?lock_set_suffix=" + suffix + "&latch_set_suffix=" + suffix})
	// No record of the bench's queue or of the baseline's rows is left: the keys the
	// store's layout gives them (store/aerospike, the queue's package doc).
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	pn, _ := strconv.Atoi(port)
	client, err := as.NewClient(host, pn)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	part := func(name string, p int) string { return fmt.Sprintf("%d:%s|%d", len(name), name, p) }
	var keys []*as.Key
	add := func(set, user string) {
		k, err := as.NewKey(ns, set, user)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	base := "dcsync-bench#" + run.queue
	add("dcsync_qspec", run.queue)
	for p := 0; p < 2; p++ {
		add("dcsync_qhead", part(run.queue, p))
		add("dcsync_qoffset", fmt.Sprintf("%d:%s5:bench%d", len(run.queue), run.queue, p))
	}
	add("dcsync_qoffset", fmt.Sprintf("%d:%s5:bench0", len(base), base))
	for seq := 0; seq < run.batches*benchBatch; seq++ {
		add("dcsync_qentry", fmt.Sprintf("%s|%d", part(run.queue, 0), seq))
		add("dcsync_qentry", fmt.Sprintf("%s|%d", part(base, 0), seq))
	}
	found, err := client.BatchExists(nil, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range found {
		if ok {
			t.Errorf("bench left record %s/%v", keys[i].SetName(), keys[i].Value())
		}
	}
}

func TestBenchHBase(t *testing.T) {
	c := hbaseCLI(t, "bench")
	run := checkBench(t, c)
	// No row of the bench's queue or of the baseline's rows is left in the queue
	// table: a scan of each prefix the store's layout gives them (store/hbase,
	// queue.go: salt | len(name) | name | partition, the spec's and dedup rows).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := hbaserpc.Dial(ctx, hbaserpc.Config{ZKQuorum: os.Getenv("DCSYNC_HBASE_ZK")})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	salted := func(logical []byte) []byte { return append([]byte{layout.Prefix(logical)}, logical...) }
	named := func(name string, p uint16) []byte {
		return binary.BigEndian.AppendUint16(append([]byte{byte(len(name))}, name...), p)
	}
	prefixes := [][]byte{salted(named(run.queue, 0)), salted(named(run.queue, 1)), salted(named("dcsync-bench:"+run.queue, 0)),
		salted(append(named(run.queue, 0xFFFF), 's'))}
	for _, prefix := range prefixes {
		end := append(append([]byte(nil), prefix...), 0xFF)
		rows, err := client.Scan(ctx, "dcsync_queue", hbaserpc.Scan{StartRow: prefix, StopRow: end})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 0 {
			t.Errorf("bench left %d rows under %q, the first %q", len(rows), prefix, rows[0].Key)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	c := newCLI(t)
	c.want(exitUsage, "bench", "--duration", "0s")
	c.want(exitUsage, "bench", "--poll", "0s")
	c.want(exitUsage, "bench", "extra")
}
