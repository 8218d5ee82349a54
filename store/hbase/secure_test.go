package hbase

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
)

// envSecurity carries the secure conformance run's Kerberos parameters (a URL query)
// to the suite's child processes.
const envSecurity = "DCSYNC_TEST_HBASE_SECURITY"

// secureCluster is the Kerberized HBase of testenv/hbase/up-secure:
// DCSYNC_HBASE_SECURE_ZK names its ZooKeeper; its run directory
// (DCSYNC_HBASE_SECURE_DIR, default testenv/hbase/run-secure) holds secure.env.
type secureCluster struct {
	zk   string
	vars map[string]string
}

// secureZK returns the Kerberized cluster; it skips the test when
// DCSYNC_HBASE_SECURE_ZK is unset (fails it when CI=true and
// DCSYNC_HBASE_SECURE_REQUIRED=1).
func secureZK(t testing.TB) secureCluster {
	t.Helper()
	zk := os.Getenv("DCSYNC_HBASE_SECURE_ZK")
	if zk == "" {
		if os.Getenv("CI") == "true" && os.Getenv("DCSYNC_HBASE_SECURE_REQUIRED") == "1" {
			t.Fatal("DCSYNC_HBASE_SECURE_ZK is not set: start testenv/hbase/up-secure and export its last line")
		}
		t.Skip("DCSYNC_HBASE_SECURE_ZK not set: skipping the Kerberized HBase tests (testenv/hbase/up-secure)")
	}
	dir := os.Getenv("DCSYNC_HBASE_SECURE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "testenv", "hbase", "run-secure")
	}
	f, err := os.Open(filepath.Join(dir, "secure.env"))
	if err != nil {
		t.Fatalf("the Kerberized HBase's secure.env: %v", err)
	}
	defer f.Close()
	c := secureCluster{zk: zk, vars: map[string]string{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			c.vars[k] = v
		}
	}
	return c
}

// query returns the Kerberos parameters of the client principal.
// With TLS on the cluster (secure.env's DCSYNC_HBASE_SECURE_TLS_CA), tls_ca too.
func (c secureCluster) query() url.Values {
	q := url.Values{
		"principal":        {c.vars["DCSYNC_HBASE_SECURE_PRINCIPAL"]},
		"keytab":           {c.vars["DCSYNC_HBASE_SECURE_KEYTAB"]},
		"krb5_conf":        {c.vars["KRB5_CONFIG"]},
		"server_principal": {c.vars["DCSYNC_HBASE_SECURE_SERVER_PRINCIPAL"]},
	}
	if ca := c.vars["DCSYNC_HBASE_SECURE_TLS_CA"]; ca != "" {
		q.Set("tls_ca", ca)
	}
	if c.zkSASL() {
		q.Set("zk_sasl", "true")
		q.Set("zk_server_principal", c.vars["DCSYNC_HBASE_SECURE_ZK_PRINCIPAL"])
	}
	return q
}

// zkSASL reports whether the cluster's ZooKeeper requires SASL of every client
// (up-secure with DCSYNC_HBASE_SECURE_ZK_SASL=1).
func (c secureCluster) zkSASL() bool { return c.vars["DCSYNC_HBASE_SECURE_ZK_SASL"] == "1" }

func (c secureCluster) url(q url.Values) *url.URL {
	return &url.URL{Scheme: "hbase", Host: c.zk, RawQuery: q.Encode()}
}

// TestSecureConformance runs the conformance suite, multi-process cases included, on
// the Kerberized HBase through OpenURL with a principal and a keytab: every call
// authenticated with SASL GSSAPI.
func TestSecureConformance(t *testing.T) {
	c := secureZK(t)
	run := randHex(4)
	tables := url.Values{"lock_table": {"dcsync_sec_locks_" + run}, "latch_table_suffix": {"dcsync_sec_" + run}}
	queueTable := "dcsync_sec_queue_" + run
	open := func(t *testing.T) driver.Store {
		t.Helper()
		q := c.query()
		for k, v := range tables {
			q[k] = v
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := OpenURL(ctx, c.url(q))
		if err != nil {
			t.Fatalf("OpenURL (Kerberos): %v", err)
		}
		setQueueTable(s, queueTable)
		t.Cleanup(func() { s.Close() })
		return s
	}
	first := open(t).(*Store)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, tb := range []string{tables.Get("lock_table"), "D_LTCH_" + tables.Get("latch_table_suffix"), queueTable} {
			if ok, err := first.client.TableExists(ctx, tb); err != nil || !ok {
				continue
			}
			if err := first.client.DisableTable(ctx, tb); err != nil {
				t.Logf("cleanup: disable %s: %v", tb, err)
			}
			if err := first.client.DeleteTable(ctx, tb); err != nil {
				t.Logf("cleanup: delete %s: %v", tb, err)
			}
		}
	})
	drivertest.Run(t, drivertest.Harness{
		Open: open,
		ProcessEnv: func(t *testing.T) []string {
			return []string{envZK + "=" + c.zk, envLockTable + "=" + tables.Get("lock_table"),
				envLatchSuffix + "=" + tables.Get("latch_table_suffix"), envQueueTable + "=" + queueTable,
				envSecurity + "=" + c.query().Encode()}
		},
		Holes:            true,
		ReserveQueueSeqs: reserveQueueSeqs,
		// TestConformance runs them; here the Lock and Registers parts cover the
		// operations they use over Kerberos and TLS.
		SkipPrimitives: true,
	})
}

// TestSecureOpenErrors: what a client gets from the Kerberized HBase when something is
// wrong, each a typed error naming what failed, quickly (no retry loop to the
// deadline): no credentials, a keytab others may read, an unknown principal, a server
// principal the KDC does not know, a password in the URL.
func TestSecureOpenErrors(t *testing.T) {
	c := secureZK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	check := func(t *testing.T, err error, code dcsync.Code, want string) {
		t.Helper()
		if dcsync.CodeOf(err) != code || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v; want %v naming %q", err, code, want)
		}
		t.Log(err)
	}

	t.Run("no credentials", func(t *testing.T) {
		q := url.Values{"lock_table": {"dcsync_sec_none_" + randHex(4)}}
		if ca := c.vars["DCSYNC_HBASE_SECURE_TLS_CA"]; ca != "" {
			q.Set("tls_ca", ca)
		}
		s, err := OpenURL(ctx, c.url(q))
		if c.zkSASL() {
			// ZooKeeper refuses the session: Open fails, naming ZooKeeper.
			check(t, err, dcsync.Unauthenticated, "ZooKeeper")
			return
		}
		if err != nil {
			t.Fatalf("OpenURL without credentials: %v (ZooKeeper is open: Open succeeds, the first call is refused)", err)
		}
		defer s.Close()
		_, err = s.InspectLock(ctx, dcsync.Key{Level: dcsync.DC, Farm: "dc1", Client: "c", Name: "n-" + randHex(3)})
		check(t, err, dcsync.Unauthenticated, "Authentication is required")
	})
	t.Run("keytab readable by others", func(t *testing.T) {
		b, err := os.ReadFile(c.vars["DCSYNC_HBASE_SECURE_KEYTAB"])
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "open.keytab")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		q := c.query()
		q.Set("keytab", path)
		_, err = OpenURL(ctx, c.url(q))
		check(t, err, dcsync.InvalidArgument, "open.keytab")
	})
	t.Run("unknown principal", func(t *testing.T) {
		q := c.query()
		q.Set("principal", "nobody@EXAMPLE.COM")
		_, err := OpenURL(ctx, c.url(q))
		check(t, err, dcsync.Unauthenticated, "nobody@EXAMPLE.COM")
	})
	t.Run("unknown server principal", func(t *testing.T) {
		q := c.query()
		q.Set("server_principal", "hbase/_HOST@EXAMPLE.COM")
		_, err := OpenURL(ctx, c.url(q))
		check(t, err, dcsync.Unauthenticated, "hbase/127.0.0.1")
	})
	t.Run("password in the URL", func(t *testing.T) {
		u := c.url(c.query())
		u.User = url.UserPassword("dcsync", "s3cret")
		_, err := OpenURL(ctx, u)
		check(t, err, dcsync.InvalidArgument, "keytab=")
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("the error shows the password: %v", err)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		if c.vars["DCSYNC_HBASE_SECURE_TLS_CA"] == "" {
			t.Skip("the cluster has no TLS (DCSYNC_HBASE_SECURE_TLS=0)")
		}
		q := c.query()
		q.Set("tls_ca", writeOtherCA(t))
		_, err := OpenURL(ctx, c.url(q))
		check(t, err, dcsync.Unauthenticated, "trusted authority")
	})
	t.Run("certificate for another name", func(t *testing.T) {
		if c.vars["DCSYNC_HBASE_SECURE_TLS_CA"] == "" {
			t.Skip("the cluster has no TLS (DCSYNC_HBASE_SECURE_TLS=0)")
		}
		q := c.query()
		q.Set("tls_name", "hbase.example.com")
		_, err := OpenURL(ctx, c.url(q))
		check(t, err, dcsync.Unauthenticated, "hbase.example.com")
	})
	t.Run("no TLS to a TLS cluster", func(t *testing.T) {
		if c.vars["DCSYNC_HBASE_SECURE_TLS_CA"] == "" {
			t.Skip("the cluster has no TLS (DCSYNC_HBASE_SECURE_TLS=0)")
		}
		q := c.query()
		q.Del("tls_ca")
		octx, ocancel := context.WithTimeout(ctx, time.Minute)
		defer ocancel()
		start := time.Now()
		_, err := OpenURL(octx, c.url(q))
		if dcsync.CodeOf(err) != dcsync.Unauthenticated || !strings.Contains(err.Error(), "TLS") {
			t.Fatalf("OpenURL without TLS to a TLS-only cluster: %v; want Unauthenticated mentioning TLS", err)
		}
		t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
	})
	t.Run("kerberos=false with a keytab", func(t *testing.T) {
		q := c.query()
		q.Set("kerberos", "false")
		_, err := OpenURL(ctx, c.url(q))
		if !errors.Is(err, dcsync.ErrInvalidArgument) {
			t.Fatalf("got %v; want InvalidArgument", err)
		}
	})
}

// writeOtherCA writes a PEM file of a certificate authority that signed nothing the
// cluster has, and returns its path.
func writeOtherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "not the cluster's CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// kinit makes a credential cache for the client principal with kinit (MIT krb5-user)
// from the keytab, with the given ticket lifetime, and returns its path; it skips the
// test when kinit is not installed.
func (c secureCluster) kinit(t *testing.T, lifetime string) string {
	t.Helper()
	kinit, err := exec.LookPath("kinit")
	if err != nil {
		t.Skip("kinit not installed (apt-get install krb5-user): skipping the credential cache test")
	}
	path := filepath.Join(t.TempDir(), "ccache")
	cmd := exec.Command(kinit, "-k", "-t", c.vars["DCSYNC_HBASE_SECURE_KEYTAB"], "-l", lifetime, c.vars["DCSYNC_HBASE_SECURE_PRINCIPAL"])
	cmd.Env = append(os.Environ(), "KRB5_CONFIG="+c.vars["KRB5_CONFIG"], "KRB5CCNAME=FILE:"+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kinit: %v: %s", err, out)
	}
	return path
}

// TestSecureCredentialCache: without a keytab the client uses kinit's credential
// cache (ccache=, else $KRB5CCNAME); a cache whose ticket has expired is refused with
// Unauthenticated saying so, at Open.
func TestSecureCredentialCache(t *testing.T) {
	c := secureZK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	withCache := func(path string) url.Values {
		q := c.query()
		q.Del("keytab")
		q.Del("principal")
		q.Set("ccache", path)
		return q
	}

	t.Run("valid", func(t *testing.T) {
		q := withCache(c.kinit(t, "1h"))
		q.Set("lock_table", "dcsync_sec_cc_"+randHex(4))
		s, err := OpenURL(ctx, c.url(q))
		if err != nil {
			t.Fatalf("OpenURL with a credential cache: %v", err)
		}
		defer s.Close()
		// A call to the master, authenticated from the cache.
		exists, err := s.client.TableExists(ctx, "hbase:meta")
		if err != nil || !exists {
			t.Fatalf("TableExists(hbase:meta) with a credential cache = %v, %v", exists, err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		path := c.kinit(t, "5s")
		// Wait until the ticket has expired (it only gets more expired).
		time.Sleep(7 * time.Second)
		_, err := OpenURL(ctx, c.url(withCache(path)))
		if dcsync.CodeOf(err) != dcsync.Unauthenticated || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("OpenURL with an expired credential cache: %v; want Unauthenticated saying it expired", err)
		}
		t.Log(err)
	})
}
