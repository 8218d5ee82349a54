package election_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/store/aerospike"
	"github.com/dcsync/dcsync/store/hbase"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
)

// realStore opens the real server named by $env (skipping when unset), closed when
// the test ends.
func realStore(t *testing.T, env, scheme string, open func(context.Context, *url.URL) (driver.LockStore, func(), error)) driver.LockStore {
	addr := os.Getenv(env)
	if addr == "" {
		t.Skip(env + " not set")
	}
	u := &url.URL{Scheme: scheme, Host: addr}
	if scheme == "aerospike" {
		u.Path = "/test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, closeFn, err := open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return s
}

// A DC election and an XDC election of the same name and client are separate: each
// has its own leader, tokens and register, and neither's publish or Proclaim sees the
// other's record (a shared register would make one's Proclaim LockLost).
func TestReviewDCAndXDCApart(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) driver.LockStore{
		"memory": func(t *testing.T) driver.LockStore { return memory.New() },
		"sqlite": func(t *testing.T) driver.LockStore {
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "e.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"hbase": func(t *testing.T) driver.LockStore {
			return realStore(t, "DCSYNC_HBASE_ZK", "hbase", func(ctx context.Context, u *url.URL) (driver.LockStore, func(), error) {
				s, err := hbase.OpenURL(ctx, u)
				if err != nil {
					return nil, nil, err
				}
				return s, func() { _ = s.Close() }, nil
			})
		},
		"aerospike": func(t *testing.T) driver.LockStore {
			return realStore(t, "DCSYNC_AEROSPIKE", "aerospike", func(ctx context.Context, u *url.URL) (driver.LockStore, func(), error) {
				s, err := aerospike.OpenURL(ctx, u)
				if err != nil {
					return nil, nil, err
				}
				return s, func() { s.Close() }, nil
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			ctx := context.Background()
			var rb [6]byte
			_, _ = rand.Read(rb[:])
			e := "review-" + hex.EncodeToString(rb[:])
			dc1 := newManager(t, s)
			x1, err := election.New(s, "app", "dc1", election.WithTTL(time.Minute), election.WithLevel(dcsync.XDC))
			if err != nil {
				t.Fatal(err)
			}
			x2, err := election.New(s, "app", "dc2", election.WithTTL(time.Minute), election.WithLevel(dcsync.XDC))
			if err != nil {
				t.Fatal(err)
			}
			dc2, err := election.New(s, "app", "dc2", election.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			var lds []*election.Leadership
			for i, m := range []*election.Manager{dc1, dc2, x1} {
				// Raise this one's token first, so that tokens of the three differ.
				for j := 0; j < i; j++ {
					ld, err := m.Campaign(ctx, e, "warm")
					if err != nil {
						t.Fatal(err)
					}
					if err := ld.Resign(ctx); err != nil {
						t.Fatal(err)
					}
				}
				ld, err := m.Campaign(ctx, e, "v"+itoa(i))
				if err != nil {
					t.Fatalf("Campaign %d: %v", i, err)
				}
				lds = append(lds, ld)
			}
			for i, ld := range lds {
				if err := ld.Proclaim(ctx, "p"+itoa(i)); err != nil {
					t.Fatalf("Proclaim of leader %d (token %d): %v", i, ld.Token(), err)
				}
			}
			for i, m := range []*election.Manager{dc1, dc2, x2} {
				got, err := m.Leader(ctx, e)
				if err != nil || got.Token != lds[i].Token() || got.Value != "p"+itoa(i) {
					t.Fatalf("Leader via manager %d = %+v, %v; want token %d value p%d", i, got, err, lds[i].Token(), i)
				}
			}
			for _, ld := range lds {
				if err := ld.Resign(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
