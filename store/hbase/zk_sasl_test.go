package hbase

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// TestSecureZKSASL, against the Kerberized HBase whose ZooKeeper requires SASL of
// every client (up-secure with DCSYNC_HBASE_SECURE_ZK_SASL=1): OpenURL with
// zk_sasl=true opens and runs a lock round (acquire, refresh, a second owner refused,
// release, free); with Kerberos but without zk_sasl, or with zk_sasl and a wrong
// ZooKeeper principal, OpenURL fails Unauthenticated naming ZooKeeper before its
// deadline.
func TestSecureZKSASL(t *testing.T) {
	c := secureZK(t)
	if !c.zkSASL() {
		t.Skip("the secure HBase's ZooKeeper does not require SASL (start it with DCSYNC_HBASE_SECURE_ZK_SASL=1)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	table := "dcsync_zksasl_" + randHex(4)

	t.Run("lock round", func(t *testing.T) {
		q := c.query()
		q.Set("lock_table", table)
		s, err := OpenURL(ctx, c.url(q))
		if err != nil {
			t.Fatalf("OpenURL with zk_sasl=true: %v", err)
		}
		defer s.Close()
		k := dcsync.Key{Level: dcsync.DC, Farm: "dc1", Client: "c", Name: "zksasl-" + randHex(3)}
		st, err := s.AcquireLock(ctx, k, "a", 30*time.Second)
		if err != nil {
			t.Fatalf("AcquireLock: %v", err)
		}
		if _, err := s.AcquireLock(ctx, k, "b", 30*time.Second); dcsync.CodeOf(err) != dcsync.LockUnavailable {
			t.Fatalf("AcquireLock by a second owner: %v; want LockUnavailable", err)
		}
		st2, err := s.RefreshLock(ctx, k, "a", 30*time.Second)
		if err != nil || st2.Token != st.Token {
			t.Fatalf("RefreshLock = %+v, %v; want token %d", st2, err, st.Token)
		}
		if err := s.ReleaseLock(ctx, k, "a"); err != nil {
			t.Fatalf("ReleaseLock: %v", err)
		}
		if _, err := s.InspectLock(ctx, k); dcsync.CodeOf(err) != dcsync.NotFound {
			t.Fatalf("InspectLock after release: %v; want NotFound", err)
		}
	})

	refused := func(t *testing.T, q url.Values) {
		t.Helper()
		q.Set("lock_table", table)
		octx, ocancel := context.WithTimeout(ctx, time.Minute)
		defer ocancel()
		s, err := OpenURL(octx, c.url(q))
		if err == nil {
			s.Close()
			t.Fatal("OpenURL succeeded")
		}
		if dcsync.CodeOf(err) != dcsync.Unauthenticated || !strings.Contains(err.Error(), "ZooKeeper") || octx.Err() != nil {
			t.Fatalf("OpenURL: %v; want Unauthenticated naming ZooKeeper before the deadline", err)
		}
		t.Log(err)
	}
	t.Run("kerberos without zk_sasl", func(t *testing.T) {
		q := c.query()
		q.Del("zk_sasl")
		q.Del("zk_server_principal")
		refused(t, q)
	})
	t.Run("wrong zk principal", func(t *testing.T) {
		q := c.query()
		q.Set("zk_server_principal", "zookeeper/nosuchhost")
		refused(t, q)
	})
}

// TestParseZKSASL: zk_sasl=true turns Kerberos on for ZooKeeper too, with
// zk_server_principal; a value other than true or false, or zk_sasl=true with
// kerberos=false, is InvalidArgument.
func TestParseZKSASL(t *testing.T) {
	k, _, err := parseSecurity("test", url.Values{"zk_sasl": {"true"}, "zk_server_principal": {"zookeeper/zk1"}})
	if err != nil || k == nil || !k.ZooKeeper || k.ZKServicePrincipal != "zookeeper/zk1" {
		t.Fatalf("zk_sasl=true: %+v, %v; want Kerberos with ZooKeeper and its principal", k, err)
	}
	if k, _, err := parseSecurity("test", url.Values{"principal": {"a@R"}, "keytab": {"/k"}}); err != nil || k == nil || k.ZooKeeper {
		t.Fatalf("Kerberos without zk_sasl: %+v, %v; want ZooKeeper unauthenticated", k, err)
	}
	for _, q := range []url.Values{
		{"zk_sasl": {"yes"}},
		{"zk_sasl": {"true"}, "kerberos": {"false"}},
	} {
		if _, _, err := parseSecurity("test", q); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("%v: %v; want InvalidArgument", q, err)
		}
	}
}
