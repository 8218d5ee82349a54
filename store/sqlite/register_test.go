package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/sqlite"
)

// TestRegisterLayout: the register table is created by the first SwapRegister (a file
// without it reads every register as absent), and holds one row per register as
// docs/stores/sqlite.md says: the farm at level DC, "" at level XDC.
func TestRegisterLayout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "reg.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dc := dcsync.Key{Level: dcsync.DC, Client: "c", Farm: "dc1", Name: "n"}
	xdc := dcsync.Key{Level: dcsync.XDC, Client: "c", Farm: "dc1", Name: "n"}
	res, err := s.ReadRegisters(ctx, []dcsync.Key{dc, xdc})
	if err != nil || res[0].Register.Gen != 0 || res[1].Register.Gen != 0 {
		t.Fatalf("ReadRegisters on a file without the register table = %+v, %v", res, err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE name = 'dcsync_registers'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the register table exists before any write (%d, %v)", n, err)
	}
	if _, err := s.SwapRegister(ctx, dc, 0, []byte("d")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SwapRegister(ctx, xdc, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	rows, err := s.DB().QueryContext(ctx, `SELECT level, farm, client, name, gen, value FROM dcsync_registers ORDER BY level`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var level, gen int
		var farm, client, name string
		var value []byte
		if err := rows.Scan(&level, &farm, &client, &name, &gen, &value); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d|%s|%s|%s|%d|%s", level, farm, client, name, gen, value))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("%d|dc1|c|n|1|d", dcsync.DC), fmt.Sprintf("%d||c|n|1|x", dcsync.XDC)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("register rows %q, want %q", got, want)
	}
}

// TestRegisterAcrossStores: swaps racing on one register from several stores on one
// file (each its own connections, as processes have) have exactly one winner per
// generation, and the final generation is the number of wins.
func TestRegisterAcrossStores(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "reg.db")
	k := dcsync.Key{Level: dcsync.XDC, Client: "c", Farm: "dc1", Name: "race"}
	const stores, tries = 4, 25
	var mu sync.Mutex
	won := map[uint64]int{}
	var wg sync.WaitGroup
	for i := range stores {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var gen uint64
			for range tries {
				r, err := s.SwapRegister(ctx, k, gen, []byte(fmt.Sprint(i)))
				switch dcsync.CodeOf(err) {
				case 0:
					mu.Lock()
					if w, dup := won[r.Gen]; dup {
						t.Errorf("generation %d won by stores %d and %d", r.Gen, w, i)
					}
					won[r.Gen] = i
					mu.Unlock()
				case dcsync.Conflict:
				default:
					t.Error(err)
					return
				}
				gen = r.Gen
			}
		}()
	}
	wg.Wait()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.ReadRegisters(ctx, []dcsync.Key{k})
	if err != nil {
		t.Fatal(err)
	}
	if g := res[0].Register.Gen; g != uint64(len(won)) || string(res[0].Register.Value) != fmt.Sprint(won[g]) {
		t.Fatalf("final register %+v after %d wins (%v)", res[0].Register, len(won), won)
	}
}

// TestRegisterReadOnly: a file opened read-only reads registers and refuses swaps.
func TestRegisterReadOnly(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes read-only files")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "ro.db")
	w, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	k := dcsync.Key{Level: dcsync.DC, Client: "c", Farm: "dc1", Name: "n"}
	if _, err := w.SwapRegister(ctx, k, 0, []byte("v")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	r, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res, err := r.ReadRegisters(ctx, []dcsync.Key{k})
	if err != nil || res[0].Register.Gen != 1 || string(res[0].Register.Value) != "v" {
		t.Fatalf("read-only ReadRegisters = %+v, %v", res, err)
	}
	if _, err := r.SwapRegister(ctx, k, 1, []byte("w")); dcsync.CodeOf(err) != dcsync.NotImplemented {
		t.Fatalf("read-only SwapRegister = %v, want NotImplemented", err)
	}
}
