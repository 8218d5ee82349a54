package hbaserpc

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"context"
	"crypto/rand"
	"encoding/hex"
	"github.com/dcsync/dcsync"
	"log/slog"
	"os"
	"testing"
	"time"
)

// zkQuorum returns DCSYNC_HBASE_ZK, skipping the test when it is unset outside CI
// and failing it when it is unset in CI.
func zkQuorum(t *testing.T) string {
	t.Helper()
	zk := os.Getenv("DCSYNC_HBASE_ZK")
	if zk == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("DCSYNC_HBASE_ZK is not set but CI=true: the HBase integration tests must run in CI (start testenv/hbase/up)")
		}
		t.Skip("DCSYNC_HBASE_ZK not set: skipping HBase integration test (run testenv/hbase/up and export its last line)")
	}
	return zk
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("DCSYNC_HBASE_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func dialTest(t *testing.T) *Client {
	t.Helper()
	zk := zkQuorum(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{ZKQuorum: zk, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Dial(%s): %v", zk, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func uniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// createTestTable creates a table with family "f" (and any extra spec) and drops it
// at the end of the test.
func createTestTable(t *testing.T, c *Client, spec TableSpec) string {
	t.Helper()
	if spec.Name == "" {
		spec.Name = uniqueName("dcsync_test")
	}
	if len(spec.Families) == 0 {
		spec.Families = []FamilySpec{{Name: "f"}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.CreateTable(ctx, spec); err != nil {
		t.Fatalf("CreateTable(%s): %v", spec.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.DisableTable(ctx, spec.Name); err != nil {
			t.Logf("cleanup: DisableTable(%s): %v", spec.Name, err)
		}
		if err := c.DeleteTable(ctx, spec.Name); err != nil {
			t.Logf("cleanup: DeleteTable(%s): %v", spec.Name, err)
		}
	})
	return spec.Name
}

// TestIntegration runs against the real HBase named by DCSYNC_HBASE_ZK. The subtests
// share one client and one table pre-split into 257 regions.
func TestIntegration(t *testing.T) {
	c := dialTest(t)
	splits := make([][]byte, 256)
	for i := range splits {
		splits[i] = []byte{byte(i)}
	}
	// 256 one-byte split keys; the first ("\x00") leaves an empty-start region
	// before it, so 257 regions.
	table := createTestTable(t, c, TableSpec{
		Families: []FamilySpec{
			{Name: "f", Compression: "GZ", MaxVersions: 3, TTL: 24 * time.Hour},
			{Name: "g"},
		},
		SplitKeys: splits,
	})
	f, g := []byte("f"), []byte("g")
	ctxT := func(t *testing.T, d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("Descriptor", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		d, err := c.DescribeTable(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Families) != 2 {
			t.Fatalf("families = %+v", d.Families)
		}
		var fam FamilyDescriptor
		for _, fd := range d.Families {
			if fd.Name == "f" {
				fam = fd
			}
		}
		for k, want := range map[string]string{"COMPRESSION": "GZ", "VERSIONS": "3", "TTL": "86400"} {
			if got := fam.Attributes[k]; got != want {
				t.Errorf("family f %s = %q, want %q (all: %v)", k, got, want, fam.Attributes)
			}
		}
		ok, err := c.TableExists(ctx, table)
		if err != nil || !ok {
			t.Fatalf("TableExists(%s) = %v, %v", table, ok, err)
		}
		ok, err = c.TableExists(ctx, table+"_missing")
		if err != nil || ok {
			t.Fatalf("TableExists(missing) = %v, %v", ok, err)
		}
		regs, err := c.Regions(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		if len(regs) != 257 {
			t.Fatalf("%d regions, want 257", len(regs))
		}
		err = c.CreateTable(ctx, TableSpec{Name: table, Families: []FamilySpec{{Name: "f"}}})
		if !IsTableExists(err) || dcsync.CodeOf(err) != dcsync.TableCreation {
			t.Fatalf("re-create error = %v", err)
		}
	})

	t.Run("PutGetTTL", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		row := []byte("\x10ttl")
		if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, []byte("short"), []byte("gone soon")}}, TTL: 1500 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, []byte("long"), []byte("stays")}, {g, []byte("x"), []byte("y")}}}); err != nil {
			t.Fatal(err)
		}
		cells, err := c.Get(ctx, table, row)
		if err != nil || len(cells) != 3 {
			t.Fatalf("Get = %+v, %v", cells, err)
		}
		if cells[0].Timestamp <= 0 || string(cells[0].Row) != string(row) {
			t.Fatalf("cell = %+v", cells[0])
		}
		cells, err = c.Get(ctx, table, row, Column{f, []byte("short")})
		if err != nil || len(cells) != 1 || string(cells[0].Value) != "gone soon" {
			t.Fatalf("Get(short) = %+v, %v", cells, err)
		}
		time.Sleep(2500 * time.Millisecond)
		cells, err = c.Get(ctx, table, row, Column{Family: f})
		if err != nil || len(cells) != 1 || string(cells[0].Qualifier) != "long" {
			t.Fatalf("Get after TTL = %+v, %v (want only f:long)", cells, err)
		}
		cells, err = c.Get(ctx, table, []byte("\x10missing"))
		if err != nil || len(cells) != 0 {
			t.Fatalf("Get(missing) = %+v, %v", cells, err)
		}
	})

	t.Run("IncrementConcurrent", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		row := []byte("\x20counter")
		const workers, each = 16, 25
		var mu sync.Mutex
		seen := map[int64]bool{}
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					cells, err := c.Increment(ctx, table, &Increment{Row: row, Deltas: []Delta{{f, []byte("n"), 1}}, TTL: time.Hour})
					if err != nil {
						t.Error(err)
						return
					}
					n, err := Int64(cells[0].Value)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if seen[n] {
						t.Errorf("value %d returned twice", n)
					}
					seen[n] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		cells, err := c.Get(ctx, table, row, Column{f, []byte("n")})
		if err != nil || len(cells) != 1 {
			t.Fatalf("Get = %v, %v", cells, err)
		}
		if n, _ := Int64(cells[0].Value); n != workers*each {
			t.Fatalf("counter = %d, want %d", n, workers*each)
		}
		if len(seen) != workers*each {
			t.Fatalf("%d distinct results, want %d", len(seen), workers*each)
		}
	})

	t.Run("CheckAndMutateIfAbsentOneWinner", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		row := []byte("\x30lock")
		const n = 16
		var wins atomic.Int32
		var winner atomic.Value
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				val := fmt.Appendf(nil, "owner-%d", i)
				ok, _, err := c.CheckAndMutate(ctx, table, row, IfAbsent(f, []byte("owner")), &Put{Values: []Value{{f, []byte("owner"), val}}})
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					wins.Add(1)
					winner.Store(string(val))
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d winners, want 1", wins.Load())
		}
		cells, err := c.Get(ctx, table, row, Column{f, []byte("owner")})
		if err != nil || len(cells) != 1 || string(cells[0].Value) != winner.Load().(string) {
			t.Fatalf("stored %+v, winner %v, err %v", cells, winner.Load(), err)
		}
	})

	t.Run("CheckAndMutateIfEquals", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		row := []byte("\x31cas")
		q := []byte("v")
		if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, q, []byte("1")}, {g, []byte("other"), []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
		ok, _, err := c.CheckAndMutate(ctx, table, row, IfEquals(f, q, []byte("0")), &Put{Values: []Value{{f, q, []byte("2")}}})
		if err != nil || ok {
			t.Fatalf("CAS with wrong expected = %v, %v", ok, err)
		}
		ok, _, err = c.CheckAndMutate(ctx, table, row, IfEquals(f, q, []byte("1")), &Put{Values: []Value{{f, q, []byte("2")}}})
		if err != nil || !ok {
			t.Fatalf("CAS with right expected = %v, %v", ok, err)
		}
		ok, res, err := c.CheckAndMutate(ctx, table, row, IfEquals(f, q, []byte("2")), &Increment{Deltas: []Delta{{f, []byte("hits"), 7}}})
		if err != nil || !ok || len(res) != 1 {
			t.Fatalf("conditional Increment = %v, %+v, %v", ok, res, err)
		}
		if n, _ := Int64(res[0].Value); n != 7 {
			t.Fatalf("conditional Increment value = %d", n)
		}
		// RowMutations: put + delete, atomically, under a condition.
		ok, _, err = c.CheckAndMutate(ctx, table, row, IfEquals(f, q, []byte("2")),
			&Put{Values: []Value{{f, q, []byte("3")}}}, &Delete{Columns: []Column{{Family: g}}})
		if err != nil || !ok {
			t.Fatalf("conditional RowMutations = %v, %v", ok, err)
		}
		ok, _, err = c.CheckAndMutate(ctx, table, row, IfEquals(f, q, []byte("2")),
			&Put{Values: []Value{{f, q, []byte("4")}}}, &Delete{Columns: []Column{{Family: f}}})
		if err != nil || ok {
			t.Fatalf("failing conditional RowMutations = %v, %v", ok, err)
		}
		cells, err := c.Get(ctx, table, row)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, cl := range cells {
			got[string(cl.Family)+":"+string(cl.Qualifier)] = string(cl.Value)
		}
		if len(got) != 2 || got["f:v"] != "3" || got["f:hits"] == "" {
			t.Fatalf("row after CAS = %v", got)
		}
		// A conditional Delete.
		ok, _, err = c.CheckAndMutate(ctx, table, row, IfEquals(f, q, []byte("3")), &Delete{})
		if err != nil || !ok {
			t.Fatalf("conditional Delete = %v, %v", ok, err)
		}
		if cells, _ := c.Get(ctx, table, row); len(cells) != 0 {
			t.Fatalf("row survived conditional delete: %v", cells)
		}
	})

	t.Run("MultiGetAcrossRegions", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		var gets []Get
		want := map[int]string{}
		for i := range 200 {
			row := []byte{byte(i), 'm', 'g'}
			if i%2 == 0 {
				v := fmt.Sprintf("val-%d", i)
				if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, []byte("mg"), []byte(v)}}}); err != nil {
					t.Fatal(err)
				}
				want[len(gets)] = v
			}
			gets = append(gets, Get{Row: row, Columns: []Column{{f, []byte("mg")}}})
		}
		// A fresh client, so that region lookups happen inside MultiGet.
		c2 := dialTest(t)
		res, err := c2.MultiGet(ctx, table, gets)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(gets) {
			t.Fatalf("%d results for %d gets", len(res), len(gets))
		}
		for i, cells := range res {
			if w, ok := want[i]; ok {
				if len(cells) != 1 || string(cells[0].Value) != w || string(cells[0].Row) != string(gets[i].Row) {
					t.Fatalf("result %d = %+v, want %s", i, cells, w)
				}
			} else if len(cells) != 0 {
				t.Fatalf("result %d for a missing row = %+v", i, cells)
			}
		}
		c2.regions.mu.RLock()
		cached := len(c2.regions.tables[table])
		c2.regions.mu.RUnlock()
		if cached < 200 {
			t.Fatalf("only %d regions cached after a 200-region MultiGet", cached)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		row := []byte("\x40del")
		put := &Put{Row: row, Values: []Value{{f, []byte("a"), []byte("1")}, {f, []byte("b"), []byte("2")}, {g, []byte("c"), []byte("3")}}}
		if err := c.Put(ctx, table, put); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, table, &Delete{Row: row, Columns: []Column{{f, []byte("a")}}}); err != nil {
			t.Fatal(err)
		}
		if cells, _ := c.Get(ctx, table, row); len(cells) != 2 {
			t.Fatalf("after column delete: %+v", cells)
		}
		if err := c.Delete(ctx, table, &Delete{Row: row, Columns: []Column{{Family: g}}}); err != nil {
			t.Fatal(err)
		}
		if cells, _ := c.Get(ctx, table, row); len(cells) != 1 || string(cells[0].Qualifier) != "b" {
			t.Fatalf("after family delete: %+v", cells)
		}
		if err := c.Delete(ctx, table, &Delete{Row: row}); err != nil {
			t.Fatal(err)
		}
		if cells, _ := c.Get(ctx, table, row); len(cells) != 0 {
			t.Fatalf("after row delete: %+v", cells)
		}
	})

	t.Run("Scan", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		for i := range 20 {
			row := []byte{0x80 + byte(i), 's'}
			if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{g, []byte("s"), []byte{byte(i)}}}}); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := c.Scan(ctx, table, Scan{StartRow: []byte{0x80}, StopRow: []byte{0x90}, Columns: []Column{{Family: g}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 16 {
			t.Fatalf("scan returned %d rows, want 16", len(rows))
		}
		for i, r := range rows {
			if r.Key[0] != 0x80+byte(i) || len(r.Cells) != 1 || r.Cells[0].Value[0] != byte(i) {
				t.Fatalf("row %d = %+v", i, r)
			}
		}
		rows, err = c.Scan(ctx, table, Scan{StartRow: []byte{0x85}, Limit: 3, Caching: 2, Columns: []Column{{Family: g}}})
		if err != nil || len(rows) != 3 || rows[0].Key[0] != 0x85 || rows[2].Key[0] != 0x87 {
			t.Fatalf("limited scan = %+v, %v", rows, err)
		}
	})

	t.Run("RegionCacheRefresh", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		row := []byte("\x50refresh")
		if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, []byte("q"), []byte("v")}}}); err != nil {
			t.Fatal(err)
		}
		real := c.regions.lookup(table, row)
		if real == nil {
			t.Fatal("region not cached after Put")
		}
		// A stale entry: right server, region name of a region that no longer exists.
		stale := *real
		stale.Name = append([]byte(nil), real.Name...)
		stale.Name[len(stale.Name)-3] ^= 1
		c.regions.add(&stale)
		if cells, err := c.Get(ctx, table, row); err != nil || len(cells) != 1 {
			t.Fatalf("Get through a stale region name = %v, %v", cells, err)
		}
		if r := c.regions.lookup(table, row); r == nil || string(r.Name) != string(real.Name) {
			t.Fatalf("cache not refreshed: %v", r)
		}
		// A stale entry pointing to a dead server.
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		dead := ln.Addr().String()
		ln.Close()
		moved := *real
		moved.Server = dead
		c.regions.add(&moved)
		if cells, err := c.Get(ctx, table, row); err != nil || len(cells) != 1 {
			t.Fatalf("Get through a dead server = %v, %v", cells, err)
		}
		// Another client disables and re-enables the table behind our back.
		other := dialTest(t)
		if err := other.DisableTable(ctx, table); err != nil {
			t.Fatal(err)
		}
		shortCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := c.Get(shortCtx, table, row)
		cancel()
		if err == nil {
			t.Fatal("Get on a disabled table succeeded")
		}
		if !hasRemoteClass(err, classTableNotEnabled) || dcsync.CodeOf(err) != dcsync.Internal {
			t.Fatalf("Get on a disabled table: %v, want TableNotEnabledException", err)
		}
		if err := other.EnableTable(ctx, table); err != nil {
			t.Fatal(err)
		}
		if cells, err := c.Get(ctx, table, row); err != nil || len(cells) != 1 {
			t.Fatalf("Get after re-enable = %v, %v", cells, err)
		}
	})

	t.Run("RelocationAfterBreak", func(t *testing.T) {
		// Every region of the server dropped from the cache (as a broken connection
		// does), then n concurrent calls on rows of n different regions: the
		// lookups are shared per table, so this counts the hbase:meta scans and the
		// time they take.
		ctx := ctxT(t, 2*time.Minute)
		c2 := dialTest(t)
		const n = 64
		rows := make([][]byte, n)
		for i := range rows {
			rows[i] = []byte{byte(i * 4), 'r'}
			if _, err := c2.Get(ctx, table, rows[i]); err != nil {
				t.Fatal(err)
			}
		}
		server := c2.regions.lookup(table, rows[0]).Server
		c2.regions.invalidateServer(server)
		before := c2.metaScans.Load()
		start := time.Now()
		var wg sync.WaitGroup
		for i := range rows {
			wg.Go(func() {
				if _, err := c2.Get(ctx, table, rows[i]); err != nil {
					t.Errorf("Get %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		t.Logf("%d calls on %d regions after their server's locations were dropped: %d hbase:meta scans in %v",
			n, n, c2.metaScans.Load()-before, time.Since(start).Round(time.Millisecond))
		// And n calls on one region: one scan.
		c2.regions.invalidateServer(server)
		before = c2.metaScans.Load()
		for i := range n {
			wg.Go(func() {
				if _, err := c2.Get(ctx, table, []byte{0x80, 'r', byte(i)}); err != nil {
					t.Errorf("Get %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if s := c2.metaScans.Load() - before; s != 1 {
			t.Errorf("%d calls on one region after its location was dropped: %d hbase:meta scans, want 1", n, s)
		}
	})

	t.Run("ContextCancellation", func(t *testing.T) {
		var gets []Get
		for i := range 256 {
			gets = append(gets, Get{Row: []byte{byte(i), 'c'}})
		}
		c2 := dialTest(t) // cold cache: many lookups to interrupt
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c2.MultiGet(ctx, table, gets)
		// Generous for a loaded machine; a MultiGet that ignored its 5ms deadline
		// would finish its 256 cold lookups instead of stopping.
		if el := time.Since(start); el > 10*time.Second {
			t.Fatalf("MultiGet past its deadline took %v", el)
		}
		if err == nil {
			t.Skip("MultiGet finished within 5ms; nothing to cancel")
		}
		if !errors.Is(err, context.DeadlineExceeded) || dcsync.CodeOf(err) != dcsync.Connection {
			t.Fatalf("error = %v", err)
		}
		ctx, cancel2 := context.WithCancel(context.Background())
		cancel2()
		if _, err := c.Get(ctx, table, []byte("x")); !errors.Is(err, context.Canceled) {
			t.Fatalf("Get with a cancelled ctx = %v", err)
		}
	})

	// The nonce test: the reply to the first Increment attempt is lost after the
	// server applied it; the retry carries the same nonce and HBase does not apply
	// it again. Without nonces the same scenario double-counts, which shows the
	// test can fail.
	t.Run("NonceDedupsInDoubtRetry", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		for _, withNonce := range []bool{true, false} {
			row := fmt.Appendf(nil, "\x60nonce-%v", withNonce)
			c2 := dialTest(t)
			c2.noNonces = !withNonce
			var dropped atomic.Int32
			c2.dropResponse = func(method string) bool {
				return method == "Mutate" && dropped.Add(1) == 1
			}
			// Warm the region cache first, so the dropped reply is the Increment's.
			if _, err := c2.Get(ctx, table, row); err != nil {
				t.Fatal(err)
			}
			cells, err := c2.Increment(ctx, table, &Increment{Row: row, Deltas: []Delta{{f, []byte("n"), 1}}})
			if err != nil {
				t.Fatalf("nonce=%v: Increment: %v", withNonce, err)
			}
			if dropped.Load() < 2 {
				t.Fatalf("nonce=%v: the reply was not dropped and retried (%d)", withNonce, dropped.Load())
			}
			got, err := c.Get(ctx, table, row, Column{f, []byte("n")})
			if err != nil || len(got) != 1 {
				t.Fatalf("Get = %v, %v", got, err)
			}
			n, _ := Int64(got[0].Value)
			t.Logf("nonce=%v: counter=%d, Increment returned %v", withNonce, n, cells)
			if withNonce && n != 1 {
				t.Fatalf("with nonces the retried Increment was applied %d times", n)
			}
			if !withNonce && n != 2 {
				t.Fatalf("without nonces the retried Increment was applied %d times; expected 2 (test premise broken)", n)
			}
		}
	})

	// Timestamps: an explicit Put timestamp; a Delete stamped at a timestamp hides only
	// versions at or before it, while one stamped by the server hides a Put stamped a
	// little in the past (a client clock behind the server's).
	t.Run("Timestamps", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		row := []byte("\x70ts")
		q := []byte("a")
		get := func() string {
			cells, err := c.Get(ctx, table, row, Column{f, q})
			if err != nil {
				t.Fatal(err)
			}
			if len(cells) == 0 {
				return "<none>"
			}
			return string(cells[0].Value)
		}
		t0 := time.Now().UnixMilli()
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, q, []byte("old")}}, Timestamp: t0 - 1000}))
		if cells, _ := c.Get(ctx, table, row, Column{f, q}); len(cells) != 1 || cells[0].Timestamp != t0-1000 {
			t.Fatalf("explicit timestamp: %+v", cells)
		}
		must(c.Delete(ctx, table, &Delete{Row: row, Timestamp: t0 - 500}))
		if v := get(); v != "<none>" {
			t.Fatalf("after a delete at t0-500 of a put at t0-1000: %s", v)
		}
		must(c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, q, []byte("hidden")}}, Timestamp: t0 - 600}))
		if v := get(); v != "<none>" {
			t.Fatalf("a put at t0-600 after a delete at t0-500 is visible: %s", v)
		}
		must(c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, q, []byte("newer")}}, Timestamp: t0 - 400}))
		if v := get(); v != "newer" {
			t.Fatalf("a put at t0-400 after a delete at t0-500: %s", v)
		}
		must(c.Delete(ctx, table, &Delete{Row: row, Columns: []Column{{f, q}}, Timestamp: t0 - 400}))
		if v := get(); v != "<none>" {
			t.Fatalf("column delete at the put's timestamp: %s", v)
		}
		// A delete stamped by the server hides a Put stamped 5 ms before the delete was
		// sent (the server's stamp is at or after the send, on this one host), however
		// long the calls take on a loaded machine.
		sent := time.Now().UnixMilli()
		must(c.Delete(ctx, table, &Delete{Row: row}))
		must(c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, q, []byte("lagging")}}, Timestamp: sent - 5}))
		if v := get(); v != "<none>" {
			t.Fatalf("a put stamped 5ms in the past after a server-stamped delete is visible: %s", v)
		}
	})

	// HBase's Increment: a new version is stamped max(server time, previous + 1); an
	// Increment without TTL carries the TTL forward from the new version; an older
	// version with a longer TTL reappears when a newer one expires, unless deleted.
	t.Run("IncrementTimestampsAndTTL", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		row := []byte("\x71inc")
		inc := func(q string, d int64, ttl time.Duration) Cell {
			t.Helper()
			cells, err := c.Increment(ctx, table, &Increment{Row: row, Deltas: []Delta{{g, []byte(q), d}}, TTL: ttl})
			if err != nil || len(cells) != 1 {
				t.Fatalf("Increment = %v, %v", cells, err)
			}
			return cells[0]
		}
		read := func(q string) (int64, bool) {
			t.Helper()
			cells, err := c.Get(ctx, table, row, Column{g, []byte(q)})
			if err != nil {
				t.Fatal(err)
			}
			if len(cells) == 0 {
				return 0, false
			}
			n, _ := Int64(cells[0].Value)
			return n, true
		}
		_, now, err := c.GetWithClock(ctx, table, row, g)
		if err != nil {
			t.Fatal(err)
		}
		first := inc("fresh", 1, 0)
		if first.Timestamp < now {
			t.Fatalf("fresh counter stamped %d, before the clock read %d", first.Timestamp, now)
		}
		var last int64
		for i := 0; i < 30; i++ {
			c := inc("fast", 1, 0)
			if c.Timestamp <= last {
				t.Fatalf("increment %d stamped %d after %d", i, c.Timestamp, last)
			}
			last = c.Timestamp
		}
		// Carry forward: created with 3s, updated at 2s without TTL: alive at 3.5s.
		inc("carry", 3, 3*time.Second)
		time.Sleep(2 * time.Second)
		inc("carry", -1, 0)
		// Reappearance: 3 with 10s, then two updates with 1s.
		inc("back", 3, 10*time.Second)
		inc("back", -1, time.Second)
		inc("back", -1, time.Second)
		// The same with the older versions deleted by the update.
		v := inc("del", 3, 10*time.Second)
		ok, _, err := c.CheckAndMutate(ctx, table, row, IfPresent(g, []byte("del")),
			&Increment{Deltas: []Delta{{g, []byte("del"), -1}}, TTL: time.Second}, &Delete{Columns: []Column{{g, []byte("del")}}, Timestamp: v.Timestamp})
		if err != nil || !ok {
			t.Fatalf("update with delete = %v, %v", ok, err)
		}
		time.Sleep(1500 * time.Millisecond)
		if n, ok := read("carry"); !ok || n != 2 {
			t.Fatalf("counter updated without TTL at 2s of 3s, at 3.5s: %d, %v; want 2 (TTL carried forward)", n, ok)
		}
		if n, ok := read("back"); !ok || n != 3 {
			t.Fatalf("older version after the newer expired: %d, %v; want 3 (HBase shows the older version again)", n, ok)
		}
		if n, ok := read("del"); ok {
			t.Fatalf("older version came back though the update deleted it: %d", n)
		}
		time.Sleep(2 * time.Second)
		if n, ok := read("carry"); ok {
			t.Fatalf("carried-forward counter still there at 5.5s: %d", n)
		}
	})

	t.Run("Conditions", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		row := []byte("\x72cond")
		put := func(q string) *Put { return &Put{Values: []Value{{f, []byte(q), []byte("1")}}} }
		if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, []byte("L"), []byte("M")}, {f, []byte("O"), []byte("me")}}}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			cond Condition
			want bool
		}{
			{"IfPresent", IfPresent(f, []byte("L")), true},
			{"IfPresentMissing", IfPresent(f, []byte("nope")), false},
			{"IfAll", IfAll(IfEquals(f, []byte("L"), []byte("M")), IfEquals(f, []byte("O"), []byte("me"))), true},
			{"IfAllOneWrong", IfAll(IfEquals(f, []byte("L"), []byte("M")), IfEquals(f, []byte("O"), []byte("you"))), false},
			{"IfAllOneMissing", IfAll(IfEquals(f, []byte("L"), []byte("M")), IfEquals(f, []byte("Z"), []byte("me"))), false},
			{"IfAllAbsent", IfAll(IfEquals(f, []byte("L"), []byte("M")), IfAbsent(f, []byte("Z"))), true},
			{"IfAllAbsentThere", IfAll(IfEquals(f, []byte("L"), []byte("M")), IfAbsent(f, []byte("O"))), false},
			{"IfAllPresent", IfAll(IfPresent(f, []byte("O")), IfAbsent(f, []byte("Z"))), true},
			{"IfAllPresentMissing", IfAll(IfPresent(f, []byte("Z")), IfEquals(f, []byte("L"), []byte("M"))), false},
			{"IfAllAbsentOneWrong", IfAll(IfEquals(f, []byte("L"), []byte("X")), IfAbsent(f, []byte("Z"))), false},
		} {
			ok, _, err := c.CheckAndMutate(ctx, table, row, tc.cond, put(tc.name))
			if err != nil || ok != tc.want {
				t.Errorf("%s = %v, %v; want %v", tc.name, ok, err, tc.want)
			}
		}
		// CheckAndMutateRead: the read sees the mutation, or the cells that refused it.
		ok, _, cells, err := c.CheckAndMutateRead(ctx, table, row, IfAbsent(f, []byte("X")), []Mutation{put("X")}, Column{f, []byte("X")})
		if err != nil || !ok || len(cells) != 1 || string(cells[0].Qualifier) != "X" {
			t.Fatalf("CheckAndMutateRead applied = %v, %+v, %v", ok, cells, err)
		}
		ok, _, cells, err = c.CheckAndMutateRead(ctx, table, row, IfAbsent(f, []byte("L")), []Mutation{put("Y")})
		if err != nil || ok || len(cells) < 3 {
			t.Fatalf("CheckAndMutateRead refused = %v, %+v, %v", ok, cells, err)
		}
	})

	// A conditional Increment, alone or with a Delete at a timestamp, whose reply is
	// lost is sent again with its nonce and applied once.
	t.Run("ConditionalIncrementNonce", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		row := []byte("\x73cnonce")
		if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, []byte("m"), []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
		c2 := dialTest(t)
		var dropped atomic.Int32
		c2.dropResponse = func(method string) bool { return (method == "Mutate" || method == "Multi") && dropped.Add(1) == 1 }
		if _, err := c2.Get(ctx, table, row); err != nil {
			t.Fatal(err)
		}
		cond := IfEquals(f, []byte("m"), []byte("x"))
		ok, _, err := c2.CheckAndMutate(ctx, table, row, cond, &Increment{Deltas: []Delta{{f, []byte("n"), 1}}})
		if err != nil || !ok || dropped.Load() < 2 {
			t.Fatalf("conditional Increment with a lost reply = %v, %v (dropped %d)", ok, err, dropped.Load())
		}
		cells, _ := c.Get(ctx, table, row, Column{f, []byte("n")})
		dropped.Store(0)
		ok, _, _, err = c2.CheckAndMutateRead(ctx, table, row, cond, []Mutation{
			&Increment{Deltas: []Delta{{f, []byte("n"), 1}}},
			&Delete{Columns: []Column{{f, []byte("n")}}, Timestamp: cells[0].Timestamp},
		})
		if err != nil || !ok || dropped.Load() < 2 {
			t.Fatalf("conditional RowMutations with a lost reply = %v, %v (dropped %d)", ok, err, dropped.Load())
		}
		cells, err = c.Get(ctx, table, row, Column{f, []byte("n")})
		if n, _ := Int64(cells[0].Value); err != nil || n != 2 {
			t.Fatalf("counter = %d, %v; want 2 (each Increment applied once)", n, err)
		}
		// A Put is not retried: outcome unknown.
		dropped.Store(0)
		_, _, err = c2.CheckAndMutate(ctx, table, row, cond, &Put{Values: []Value{{f, []byte("p"), []byte("1")}}})
		if dcsync.CodeOf(err) != dcsync.Connection {
			t.Fatalf("conditional Put with a lost reply: %v, want a Connection error", err)
		}
	})
}

// muteConn swallows everything the server sends while muted: to the client, the
// server has gone silent (no reply, no RST).
type muteConn struct {
	net.Conn
	muted atomic.Bool
}

func (m *muteConn) Read(b []byte) (int, error) {
	for {
		n, err := m.Conn.Read(b)
		if err != nil || !m.muted.Load() {
			return n, err
		}
	}
}

// TestIntegrationSilentConnection: against the real HBase, a region server
// connection that goes silent is closed after one RPC timeout and the call goes
// through on a new connection (found again through ZooKeeper and hbase:meta).
func TestIntegrationSilentConnection(t *testing.T) {
	zk := zkQuorum(t)
	var mu sync.Mutex
	var conns []*muteConn
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, Config{ZKQuorum: zk, Logger: testLogger(t), RPCTimeout: 2 * time.Second,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			mc := &muteConn{Conn: nc}
			mu.Lock()
			conns = append(conns, mc)
			mu.Unlock()
			return mc, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// hbase:meta itself is a table every cluster has: no table to create.
	row := []byte("dcsync-silent-test")
	if _, err := c.Get(ctx, metaTable, row); err != nil {
		t.Fatalf("Get before the silence: %v", err)
	}
	mu.Lock()
	before := len(conns)
	for _, mc := range conns {
		mc.muted.Store(true)
	}
	mu.Unlock()
	if _, err := c.Get(ctx, metaTable, row); err != nil {
		t.Fatalf("Get after the connection went silent: %v", err)
	}
	mu.Lock()
	after := len(conns)
	mu.Unlock()
	if after <= before {
		t.Fatalf("no new connection after the silence (%d dials before, %d after)", before, after)
	}
}
