package hbaserpc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// loadZKSASLEnv is loadSecureEnv for a Kerberized HBase whose ZooKeeper requires SASL
// of every client (testenv/hbase/up-secure with DCSYNC_HBASE_SECURE_ZK_SASL=1: its
// secure.env says DCSYNC_HBASE_SECURE_ZK_SASL=1); it skips against another one.
func loadZKSASLEnv(t *testing.T) secureEnv {
	t.Helper()
	env := loadSecureEnv(t)
	dir := os.Getenv("DCSYNC_HBASE_SECURE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "testenv", "hbase", "run-secure")
	}
	b, err := os.ReadFile(filepath.Join(dir, "secure.env"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nDCSYNC_HBASE_SECURE_ZK_SASL=1\n") {
		t.Skip("the secure HBase's ZooKeeper does not require SASL (start it with DCSYNC_HBASE_SECURE_ZK_SASL=1)")
	}
	return env
}

// TestZKSASLIntegration: against a ZooKeeper that requires SASL of every client, a
// client with Kerberos.ZooKeeper authenticates its ZooKeeper sessions and works; one
// without gets Unauthenticated naming ZooKeeper, before its deadline (no retry
// loop); a wrong ZooKeeper principal is Unauthenticated too.
func TestZKSASLIntegration(t *testing.T) {
	env := loadZKSASLEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("zk sasl", func(t *testing.T) {
		cfg := env.config(t)
		cfg.Kerberos.ZooKeeper = true
		c, err := Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("Dial with ZooKeeper SASL: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.lookupMaster(ctx); err != nil {
			t.Fatalf("master location: %v", err)
		}
		table := createTestTable(t, c, TableSpec{})
		row := []byte("r1")
		if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{Family: []byte("f"), Qualifier: []byte("q"), Value: []byte("v")}}}); err != nil {
			t.Fatalf("Put: %v", err)
		}
		cells, err := c.Get(ctx, table, row)
		if err != nil || len(cells) != 1 || string(cells[0].Value) != "v" {
			t.Fatalf("Get = %v, %v; want one cell v", cells, err)
		}
	})

	t.Run("no zk sasl", func(t *testing.T) {
		cfg := env.config(t)
		cfg.Kerberos.ZooKeeper = false
		dctx, dcancel := context.WithTimeout(ctx, time.Minute)
		defer dcancel()
		c, err := Dial(dctx, cfg)
		if err == nil {
			c.Close()
			t.Fatal("Dial without ZooKeeper SASL succeeded against a ZooKeeper that requires it")
		}
		if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), "ZooKeeper") || dctx.Err() != nil {
			t.Fatalf("Dial without ZooKeeper SASL: %v; want Unauthenticated naming ZooKeeper before the deadline", err)
		}
		t.Log(err)
	})

	t.Run("wrong zk principal", func(t *testing.T) {
		cfg := env.config(t)
		cfg.Kerberos.ZooKeeper = true
		cfg.Kerberos.ZKServicePrincipal = "nosuch/localhost"
		dctx, dcancel := context.WithTimeout(ctx, time.Minute)
		defer dcancel()
		c, err := Dial(dctx, cfg)
		if err == nil {
			c.Close()
			t.Fatal("Dial with an unknown ZooKeeper principal succeeded")
		}
		if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), "ZooKeeper") || dctx.Err() != nil {
			t.Fatalf("Dial with a wrong ZooKeeper principal: %v; want Unauthenticated naming ZooKeeper before the deadline", err)
		}
		t.Log(err)
	})
}
