package hbaserpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/keytab"

	"github.com/dcsync/dcsync"
)

// secureEnv is the Kerberized HBase of testenv/hbase/up-secure: DCSYNC_HBASE_SECURE_ZK
// names its ZooKeeper, and its run directory (DCSYNC_HBASE_SECURE_DIR, default
// testenv/hbase/run-secure) holds secure.env, the client's settings.
type secureEnv struct {
	zk, krb5Conf, keytab, principal, otherKeytab, serverPrincipal, tlsCA string
	// zkPrincipal is set when ZooKeeper requires SASL (DCSYNC_HBASE_SECURE_ZK_SASL=1).
	zkPrincipal string
}

func loadSecureEnv(t *testing.T) secureEnv {
	t.Helper()
	zk := os.Getenv("DCSYNC_HBASE_SECURE_ZK")
	if zk == "" {
		if os.Getenv("CI") == "true" && os.Getenv("DCSYNC_HBASE_SECURE_REQUIRED") == "1" {
			t.Fatal("DCSYNC_HBASE_SECURE_ZK is not set: start testenv/hbase/up-secure")
		}
		t.Skip("DCSYNC_HBASE_SECURE_ZK not set: skipping the Kerberized HBase tests (testenv/hbase/up-secure)")
	}
	dir := os.Getenv("DCSYNC_HBASE_SECURE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "testenv", "hbase", "run-secure")
	}
	f, err := os.Open(filepath.Join(dir, "secure.env"))
	if err != nil {
		t.Fatalf("secure.env of the Kerberized HBase: %v", err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	return secureEnv{
		zk:              zk,
		krb5Conf:        vars["KRB5_CONFIG"],
		keytab:          vars["DCSYNC_HBASE_SECURE_KEYTAB"],
		principal:       vars["DCSYNC_HBASE_SECURE_PRINCIPAL"],
		otherKeytab:     vars["DCSYNC_HBASE_SECURE_OTHER_KEYTAB"],
		serverPrincipal: vars["DCSYNC_HBASE_SECURE_SERVER_PRINCIPAL"],
		tlsCA:           vars["DCSYNC_HBASE_SECURE_TLS_CA"],
		zkPrincipal:     vars["DCSYNC_HBASE_SECURE_ZK_PRINCIPAL"],
	}
}

// config is the client configuration of the secure cluster: Kerberos, and TLS when
// the cluster has it.
func (e secureEnv) config(t *testing.T) Config {
	t.Helper()
	cfg := Config{ZKQuorum: e.zk, Kerberos: e.kerberos(), Logger: testLogger(t)}
	if e.tlsCA != "" {
		pemBytes, err := os.ReadFile(e.tlsCA)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pemBytes)
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return cfg
}

func (e secureEnv) kerberos() *Kerberos {
	return &Kerberos{Principal: e.principal, Keytab: e.keytab, Krb5Conf: e.krb5Conf, ServicePrincipal: e.serverPrincipal,
		ZooKeeper: e.zkPrincipal != "", ZKServicePrincipal: e.zkPrincipal}
}

// TestKerberosIntegration: with a keytab the client authenticates with SASL GSSAPI
// and works (table created, written, read, dropped); without credentials, with a
// keytab of wrong keys, or with another principal's keytab, it gets Unauthenticated
// naming what failed, quickly (no retry loop until the deadline).
func TestKerberosIntegration(t *testing.T) {
	env := loadSecureEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("keytab", func(t *testing.T) {
		c, err := Dial(ctx, env.config(t))
		if err != nil {
			t.Fatalf("Dial with keytab: %v", err)
		}
		t.Cleanup(func() { c.Close() }) // after the table's cleanup
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

	t.Run("no credentials", func(t *testing.T) {
		cfg := env.config(t)
		cfg.Kerberos = nil
		c, err := Dial(ctx, cfg)
		if env.zkPrincipal != "" {
			// ZooKeeper requires SASL: Dial fails (TestZKSASLIntegration checks how).
			if !errors.Is(err, dcsync.ErrUnauthenticated) {
				t.Fatalf("Dial (simple) with ZooKeeper requiring SASL: %v; want Unauthenticated", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Dial (simple): %v", err)
		}
		defer c.Close()
		start := time.Now()
		_, err = c.TableExists(ctx, "hbase:meta")
		if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), "Authentication is required") {
			t.Fatalf("simple auth against a Kerberized HBase: %v; want Unauthenticated, the server's \"Authentication is required\"", err)
		}
		t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
	})

	t.Run("wrong keytab", func(t *testing.T) {
		// A keytab of the right principal with keys the KDC does not know.
		kt := keytab.New()
		name, realm, _ := strings.Cut(env.principal, "@")
		for _, et := range []int32{etypeID.AES128_CTS_HMAC_SHA1_96, etypeID.AES256_CTS_HMAC_SHA1_96} {
			if err := kt.AddEntry(name, realm, "not the password", time.Now(), 1, et); err != nil {
				t.Fatal(err)
			}
		}
		b, err := kt.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "wrong.keytab")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		k := env.kerberos()
		k.Keytab = path
		cfg := env.config(t)
		cfg.Kerberos = k
		_, err = Dial(ctx, cfg)
		if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), "wrong.keytab") {
			t.Fatalf("Dial with a wrong keytab: %v; want Unauthenticated naming the keytab", err)
		}
		t.Log(err)
	})

	t.Run("another principal's keytab", func(t *testing.T) {
		k := env.kerberos()
		k.Keytab = env.otherKeytab // holds other@REALM, not dcsync@REALM
		cfg := env.config(t)
		cfg.Kerberos = k
		_, err := Dial(ctx, cfg)
		if !errors.Is(err, dcsync.ErrUnauthenticated) {
			t.Fatalf("Dial with another principal's keytab: %v; want Unauthenticated", err)
		}
		t.Log(err)
	})

	t.Run("wrong server principal", func(t *testing.T) {
		k := env.kerberos()
		k.ServicePrincipal = "hbase/_HOST" // hbase/127.0.0.1: not in the KDC
		cfg := env.config(t)
		cfg.Kerberos = k
		_, err := Dial(ctx, cfg)
		if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), "hbase/127.0.0.1") {
			t.Fatalf("a server principal the KDC does not know: %v; want Unauthenticated naming it", err)
		}
		t.Log(err)
	})
}

// TestKerberosTicketRenewal: a client that outlives its tickets keeps working. The
// client asks for 15 s tickets (its own krb5.conf's ticket_lifetime), writes, waits
// until its ticket-granting and service tickets have expired, loses its connections,
// and reads again: the new connections authenticate with tickets gotten anew from
// the keytab.
func TestKerberosTicketRenewal(t *testing.T) {
	env := loadSecureEnv(t)
	conf, err := os.ReadFile(env.krb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	short := strings.Replace(string(conf), "[libdefaults]", "[libdefaults]\n    ticket_lifetime = 15s", 1)
	path := filepath.Join(t.TempDir(), "krb5.conf")
	if err := os.WriteFile(path, []byte(short), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := env.config(t)
	cfg.Kerberos.Krb5Conf = path
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	table := createTestTable(t, c, TableSpec{})
	row := []byte("r1")
	if err := c.Put(ctx, table, &Put{Row: row, Values: []Value{{Family: []byte("f"), Qualifier: []byte("q"), Value: []byte("v")}}}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	// Past the tickets' end (they only get more expired).
	time.Sleep(25 * time.Second)
	c.connMu.Lock()
	var conns []*rpcConn
	for _, s := range c.conns {
		if s.c != nil {
			conns = append(conns, s.c)
		}
	}
	c.connMu.Unlock()
	for _, rc := range conns {
		rc.close(errors.New("test: connection dropped"))
	}
	cells, err := c.Get(ctx, table, row)
	if err != nil || len(cells) != 1 || string(cells[0].Value) != "v" {
		t.Fatalf("Get after the tickets expired = %v, %v; want one cell v", cells, err)
	}
}
