package hbaserpc

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestRawGet (real HBase): a Put stamped at or before a row Delete's marker but written
// after it is invisible to a normal read; a raw Get (Get.Raw, as MultiGet and
// CheckAndMutateGets send it) shows the marker and both Puts beneath it, with their
// types, beyond the family's VERSIONS 1 (HBase refuses a raw read that names columns:
// it reads the whole row). A normal read in the same call still sees what it always saw.
func TestRawGet(t *testing.T) {
	c := dialTest(t)
	table := createTestTable(t, c, TableSpec{Families: []FamilySpec{{Name: "f", MaxVersions: 1}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, l, o := []byte("f"), []byte("L"), []byte("O")
	row := []byte("raw-row")
	put := func(ts int64, v string) {
		t.Helper()
		if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{f, l, []byte(v)}}, Timestamp: ts}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().UnixMilli()
	put(t0-2000, "a") // written before the marker: released by it
	if err := c.Delete(ctx, table, &Delete{Row: row}); err != nil {
		t.Fatal(err)
	}
	put(t0-1000, "b") // written after the marker, stamped before it: hidden at once
	if cells, err := c.Get(ctx, table, row); err != nil || len(cells) != 0 {
		t.Fatalf("normal read after the delete = %v, %v; want nothing", cells, err)
	}
	raw := Get{Row: row, Raw: true, MaxVersions: 8}
	res, err := c.MultiGet(ctx, table, []Get{raw})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, cells []Cell) {
		t.Helper()
		var markers int
		var puts []string
		for _, x := range cells {
			switch {
			case x.Type == CellDeleteFamily && len(x.Qualifier) == 0:
				markers++
				if x.Timestamp < t0 {
					t.Errorf("%s: family marker at %d, before the delete was sent (%d)", what, x.Timestamp, t0)
				}
			case x.Type == CellPut && bytes.Equal(x.Qualifier, l):
				puts = append(puts, string(x.Value))
			}
		}
		if markers != 1 || len(puts) < 2 || puts[len(puts)-2] != "b" || puts[len(puts)-1] != "a" {
			t.Fatalf("%s: %d family markers and Puts %q (want 1 marker, then b and a, newest first); cells %+v", what, markers, puts, cells)
		}
	}
	check("raw MultiGet", res[0])

	// In the call of a check-and-mutate: the mutation is applied, the normal read sees
	// it alone, the raw read sees it above the hidden ones.
	ok, _, reads, err := c.CheckAndMutateGets(ctx, table, row, IfAbsent(f, l),
		[]Mutation{&Put{Values: []Value{{f, l, []byte("c")}, {f, o, []byte("me")}}}},
		Get{Columns: []Column{{Family: f}}}, raw)
	if err != nil || !ok {
		t.Fatalf("CheckAndMutateGets = %v, %v", ok, err)
	}
	if len(reads) != 2 || len(reads[0]) != 2 || string(reads[0][0].Value) != "c" || reads[0][0].Type != CellPut {
		t.Fatalf("normal read in the call = %+v, want L=c and O=me", reads)
	}
	if got := reads[1]; len(got) < 2 || got[1].Type != CellPut || string(got[1].Value) != "c" {
		t.Fatalf("raw read in the call = %+v, want the marker then L=c first", got)
	}
	check("raw read in CheckAndMutateGets", reads[1])
}
