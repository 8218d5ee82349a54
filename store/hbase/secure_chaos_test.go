package hbase

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/chaos"
	"github.com/dcsync/dcsync/internal/faultproxy"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// TestSecureChaos is TestChaosFaultProxy's short run on the Kerberized, TLS-enabled
// HBase of testenv/hbase/up-secure: the store's region-server connections go through
// internal/faultproxy (a TCP proxy: the TLS records and the SASL GSSAPI exchange inside
// them pass through unchanged, and the client checks the certificate against the
// region server's own name, since the proxy redirects the dial, not the address), with
// delays, lost replies, resets and late-landing requests; every reset costs a new TLS
// handshake and a new Kerberos authentication. The history is checked for
// linearizability as on the plain cluster.
func TestSecureChaos(t *testing.T) {
	sc := secureZK(t)
	krb, tc, err := parseSecurity("test", sc.query())
	if err != nil {
		t.Fatal(err)
	}
	if krb == nil {
		t.Fatal("secure.env gives no Kerberos parameters")
	}
	if tc == nil && sc.vars["DCSYNC_HBASE_SECURE_TLS_CA"] != "" {
		t.Fatal("tls_ca given but no TLS configuration parsed")
	}
	c, p := faultproxy.HBase(t, sc.zk, hbaserpc.Config{RPCTimeout: time.Second, MaxAttempts: 8,
		BackoffMax: 200 * time.Millisecond, Kerberos: krb, TLS: tc, Logger: testLogger()})
	p.SetMaxHold(2 * time.Second)
	// The default tables, created once on the cluster and kept (the lock and latch
	// names are the run's own): creating and dropping tables of its own cost the run
	// four times what its chaos does.
	s, err := New(ctxT(t, time.Minute), c, Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// Create the tables before any fault: table creation is not what is tested.
	for _, tb := range []*lazyTable{&s.locks, &s.latches} {
		if err := s.ready(ctxT(t, 3*time.Minute), "test", tb); err != nil {
			t.Fatal(err)
		}
	}
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run(level.String(), func(t *testing.T) {
			rep := chaos.RunT(t, chaos.Scenario{
				Open:       func(context.Context) (driver.Store, error) { return keepOpen{s}, nil },
				Goroutine:  4,
				Duration:   proxyChaosDuration(t),
				MinLockOps: chaos.FaultMinLockOps, MaxDuration: max(chaos.FaultMaxDuration, proxyChaosDuration(t)),
				Level:  level,
				Name:   fmt.Sprintf("secchaos-%s-%d", level, time.Now().UnixNano()),
				Fault:  p.Inject,
				Settle: func() { p.Disarm(); p.ReleaseHeld() },
				// Through TLS a fault (a lost or held chunk of a TLS record) breaks
				// the connection's record stream, and the client's next connection
				// costs a TLS handshake and a Kerberos exchange: a second between
				// faults left a loaded machine (load 24 on 2 cores) no time for work
				// between them (8 acquisitions in 3 minutes); three do.
				FaultEvery: 3 * time.Second,
			})
			p.ReleaseHeld()
			if err := p.WaitSettled(ctxT(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
			t.Logf("faultproxy secure hbase %s: operations lock=%d latch=%d; proxy %v", level, rep.Acquisitions, rep.LatchOps, p.Counts())
		})
	}
	if c := p.Counts(); c.DroppedReplies == 0 || c.Held == 0 || c.Delays == 0 || c.Resets == 0 {
		t.Fatalf("the runs did not inject every kind of fault: %v", c)
	}
}
