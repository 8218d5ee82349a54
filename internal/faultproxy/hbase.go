package faultproxy

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// HBase starts a proxy in front of the region server of the HBase cluster whose
// ZooKeeper quorum is zk (the server hosting hbase:meta: the test cluster has one region
// server) and dials a client whose connections to that server go through the proxy,
// while ZooKeeper and the master are reached directly. The client learns the region
// server's address from ZooKeeper and hbase:meta; its Config.Dial, set here to the
// proxy's Redirect, is what sends that address to the proxy. cfg's ZKQuorum and Dial are
// overwritten. The client and the proxy are closed when t ends. A store opened on the
// client (store/hbase New) sends its region-server traffic through the proxy.
func HBase(t testing.TB, zk string, cfg hbaserpc.Config) (*hbaserpc.Client, *Proxy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// cfg's credentials locate the server too: a ZooKeeper that requires SASL
	// (Kerberos.ZooKeeper) refuses an unauthenticated session.
	plain, err := hbaserpc.Dial(ctx, hbaserpc.Config{ZKQuorum: zk, Kerberos: cfg.Kerberos, TLS: cfg.TLS})
	if err != nil {
		t.Fatalf("faultproxy: HBase at %s: %v", zk, err)
	}
	rs, err := plain.MetaServer(ctx)
	plain.Close()
	if err != nil {
		t.Fatalf("faultproxy: HBase at %s: locating the region server: %v", zk, err)
	}
	p := Start(t, rs)
	cfg.ZKQuorum, cfg.Dial = zk, p.Redirect(cfg.Dial)
	c, err := hbaserpc.Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("faultproxy: HBase at %s through the proxy: %v", zk, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, p
}
