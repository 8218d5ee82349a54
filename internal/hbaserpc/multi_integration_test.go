package hbaserpc

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// TestIntegrationMultiMutate runs MultiMutate against the real HBase, on a small table
// of 4 regions (few regions: the test cluster is small).
func TestIntegrationMultiMutate(t *testing.T) {
	c := dialTest(t)
	table := createTestTable(t, c, TableSpec{SplitKeys: [][]byte{{0x40}, {0x80}, {0xc0}}})
	f, q := []byte("f"), []byte("q")
	row := func(i int) []byte { return fmt.Appendf(nil, "%c-row-%04d", byte(i*7%256), i) }
	ctxT := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("PutsAndConditions", func(t *testing.T) {
		ctx := ctxT(t)
		const n = 400
		// Rows 0..n/2 exist beforehand; if-absent puts of every row apply only to the rest.
		var pre []Action
		for i := 0; i < n/2; i++ {
			pre = append(pre, Action{Mutation: &Put{Row: row(i), Values: []Value{{f, q, []byte("old")}}}})
		}
		res, err := c.MultiMutate(ctx, table, pre)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if !r.Applied {
				t.Fatalf("put %d not applied: %+v", i, r)
			}
		}
		cond := IfAbsent(f, q)
		var acts []Action
		for i := 0; i < n; i++ {
			acts = append(acts, Action{Mutation: &Put{Row: row(i), Values: []Value{{f, q, []byte("new")}}}, Cond: &cond})
		}
		acts = append(acts, Action{Mutation: &Increment{Row: row(0), Deltas: []Delta{{f, []byte("n"), 3}}}})
		res, err = c.MultiMutate(ctx, table, acts)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if res[i].Err != nil || res[i].Applied != (i >= n/2) {
				t.Fatalf("conditional put %d: %+v", i, res[i])
			}
		}
		if v, err := Int64(res[n].Cells[0].Value); err != nil || v != 3 || !res[n].Applied {
			t.Fatalf("increment: %+v", res[n])
		}
		var gets []Get
		for i := 0; i < n; i++ {
			gets = append(gets, Get{Row: row(i), Columns: []Column{{f, q}}})
		}
		got, err := c.MultiGet(ctx, table, gets)
		if err != nil {
			t.Fatal(err)
		}
		for i, cells := range got {
			want := "old"
			if i >= n/2 {
				want = "new"
			}
			if len(cells) != 1 || string(cells[0].Value) != want {
				t.Fatalf("row %d = %+v, want %s", i, cells, want)
			}
		}
		regions, err := c.Regions(ctx, table)
		if err != nil || len(regions) != 4 {
			t.Fatalf("regions %v, %v", regions, err)
		}
	})

	// A stale location (a region name the server does not serve) is refused with
	// NotServingRegion: the actions are located again and applied.
	t.Run("StaleRegion", func(t *testing.T) {
		ctx := ctxT(t)
		regions, err := c.Regions(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		c.regions.invalidateTable(table)
		c.regions.add(&Region{Table: table, Name: []byte(table + ",,1700000000000.0123456789abcdef0123456789abcdef."), Server: regions[0].Server})
		var acts []Action
		for i := 1000; i < 1100; i++ {
			acts = append(acts, Action{Mutation: &Put{Row: row(i), Values: []Value{{f, q, []byte("s")}}}})
		}
		before := c.metaScans.Load()
		res, err := c.MultiMutate(ctx, table, acts)
		if err != nil {
			t.Fatalf("%v: %+v", err, res[0])
		}
		if c.metaScans.Load() == before {
			t.Fatalf("no hbase:meta lookup after a stale location")
		}
		cells, err := c.Get(ctx, table, row(1050))
		if err != nil || len(cells) != 1 || string(cells[0].Value) != "s" {
			t.Fatalf("row after relocation: %+v, %v", cells, err)
		}
	})

	// A Put with a read-back sees the row after the Put, including a cell written
	// before by a conditional action.
	t.Run("ReadBack", func(t *testing.T) {
		ctx := ctxT(t)
		cond := IfAbsent(f, q)
		r1, r2 := row(3000), row(3001)
		mark := []byte("t")
		res, err := c.MultiMutate(ctx, table, []Action{{Mutation: &Put{Row: r1, Values: []Value{{f, mark, []byte("1")}}}, Cond: &cond}})
		if err != nil || !res[0].Applied {
			t.Fatalf("%+v, %v", res, err)
		}
		res, err = c.MultiMutate(ctx, table, []Action{
			{Mutation: &Put{Row: r1, Values: []Value{{f, q, []byte("e1")}}}, Read: []Column{{f, mark}}},
			{Mutation: &Put{Row: r2, Values: []Value{{f, q, []byte("e2")}}}, Read: []Column{}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res[0].Read) != 1 || string(res[0].Read[0].Qualifier) != "t" {
			t.Fatalf("read-back of r1: %+v", res[0].Read)
		}
		if len(res[1].Read) != 1 || string(res[1].Read[0].Value) != "e2" {
			t.Fatalf("read-back of r2: %+v", res[1].Read)
		}
	})

	// A lost reply: the idempotent actions are sent again (the Increment with its nonce,
	// applied once), the conditional Put reports an unknown outcome, and was applied.
	t.Run("LostReply", func(t *testing.T) {
		ctx := ctxT(t)
		c2 := dialTest(t)
		var dropped atomic.Int32
		c2.dropResponse = func(method string) bool { return method == "Multi" && dropped.Add(1) == 1 }
		cond := IfAbsent(f, q)
		r1, r2, r3 := row(2000), row(2001), row(2002)
		res, err := c2.MultiMutate(ctx, table, []Action{
			{Mutation: &Put{Row: r1, Values: []Value{{f, q, []byte("p")}}}},
			{Mutation: &Put{Row: r2, Values: []Value{{f, q, []byte("c")}}}, Cond: &cond},
			{Mutation: &Increment{Row: r3, Deltas: []Delta{{f, q, 1}}}},
		})
		if dcsync.CodeOf(err) != dcsync.Connection || dropped.Load() < 2 {
			t.Fatalf("error %v (dropped %d), want Connection from the conditional put", err, dropped.Load())
		}
		if !res[0].Applied || res[0].Err != nil || !res[2].Applied || res[2].Err != nil || dcsync.CodeOf(res[1].Err) != dcsync.Connection {
			t.Fatalf("results %+v", res)
		}
		// The retried Increment, deduplicated by its nonce, returns the counter (its
		// current value), flagged Resent.
		if !res[2].Resent || res[0].Resent != true || len(res[2].Cells) != 1 {
			t.Fatalf("retried increment returned %+v", res[2].Cells)
		}
		if v, _ := Int64(res[2].Cells[0].Value); v != 1 {
			t.Fatalf("retried increment returned %d, want 1", v)
		}
		cells, err := c.Get(ctx, table, r3)
		if err != nil || len(cells) != 1 {
			t.Fatalf("counter row: %+v, %v (increment result %+v)", cells, err, res[2])
		}
		if v, _ := Int64(cells[0].Value); v != 1 {
			t.Fatalf("counter %d, %v: want 1 (applied once)", v, err)
		}
		cells, err = c.Get(ctx, table, r2)
		if err != nil || len(cells) != 1 || string(cells[0].Value) != "c" {
			t.Fatalf("in-doubt conditional put: row %+v, %v (the dropped request was applied)", cells, err)
		}
	})
}
