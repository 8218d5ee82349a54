package aerospike_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/internal/tlstest"
	"github.com/dcsync/dcsync/store/aerospike"
)

// tlsName is the TLS name of the test "cluster": the name its certificate carries.
const tlsName = "dcsync-aerospike-test"

// tlsURL is the URL of the store behind proxy, with the given query.
func tlsURL(addr string, q url.Values) *url.URL {
	return &url.URL{Scheme: "aerospike", Host: addr, Path: "/" + namespace, RawQuery: q.Encode()}
}

// tlsFront starts a TLS-terminating proxy in front of the real server, with a server
// certificate for tlsName signed by a new CA, playing the Enterprise parts a asks for
// (tlstest.Aerospike: TLS peer discovery always; the login protocol when a has users).
// ask, when not nil, makes the proxy want a client certificate signed by it.
func tlsFront(t *testing.T, ask *tlstest.CA, a *tlstest.Aerospike) (*tlstest.Proxy, *tlstest.CA) {
	t.Helper()
	addr := realServer(t)
	ca := tlstest.NewCA(t, t.TempDir(), "cluster")
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, tlsName).TLS}, MinVersion: tls.VersionTLS12}
	if ask != nil {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, ask.Pool()
	}
	if a == nil {
		a = &tlstest.Aerospike{}
	}
	return tlstest.NewAerospikeProxy(t, addr, cfg, a), ca
}

// passwordFile writes password to a file of mode 0600 and returns its path.
func passwordFile(t *testing.T, password string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(p, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConformanceTLS runs the conformance suite through a TLS-terminating proxy in
// front of the real server (Aerospike Community has no TLS), logged in as a user: the
// client speaks real TLS, checks the proxy's certificate against tls_ca and tls_name,
// logs in (the proxy plays Enterprise's login, see tlstest.Aerospike) and authenticates
// every connection, and every command goes through the encrypted connection.
func TestConformanceTLS(t *testing.T) {
	const password = "conformance-pw"
	a := &tlstest.Aerospike{Users: map[string]string{"suite": password}}
	proxy, ca := tlsFront(t, nil, a)
	u := tlsURL(proxy.Addr(), url.Values{"tls_ca": {ca.File}, "tls_name": {tlsName}, "user": {"suite"}, "password_file": {passwordFile(t, password)}})
	drivertest.Run(t, drivertest.Harness{
		Open: func(t *testing.T) driver.Store {
			s, err := aerospike.OpenURL(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Holes:            true,
		ReserveQueueSeqs: reserveQueueSeqs,
		// TestConformance runs them; here the Lock and Registers parts cover the
		// operations they use over TLS.
		SkipPrimitives: true,
	})
	if ok, failed := proxy.Handshakes(); ok == 0 || failed != 0 {
		t.Fatalf("the proxy saw %d TLS handshakes and %d failures (last: %v); want some and none", ok, failed, proxy.LastFailure())
	}
	if ok, refused := a.Logins(); ok == 0 || refused != 0 {
		t.Fatalf("the proxy saw %d logins and %d refusals; want some and none", ok, refused)
	}
}

// openCtx bounds an open in a test: a refusal must come well before it ends (the
// store's open timeout is 5 s), never a hang.
func openCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestTLSRefused: a certificate the client must refuse, a client certificate the
// server refuses, TLS to a port without TLS and plain TCP to a TLS port each fail with
// a typed error that names what failed, not a hang or an internal error.
func TestTLSRefused(t *testing.T) {
	clients := tlstest.NewCA(t, t.TempDir(), "clients")
	proxy, ca := tlsFront(t, nil, nil)
	mtls, mtlsCA := tlsFront(t, clients, nil)
	other := tlstest.NewCA(t, t.TempDir(), "other")
	stranger := other.Client(t, "stranger")
	alice := clients.Client(t, "alice")
	for _, tc := range []struct {
		name string
		addr string
		q    url.Values
		code dcsync.Code
		says string
	}{
		{"UntrustedCA", proxy.Addr(), url.Values{"tls_ca": {other.File}, "tls_name": {tlsName}}, dcsync.Unauthenticated, "not signed by a trusted authority"},
		{"SystemRootsOnly", proxy.Addr(), url.Values{"tls": {"true"}, "tls_name": {tlsName}}, dcsync.Unauthenticated, "not signed by a trusted authority"},
		{"WrongTLSName", proxy.Addr(), url.Values{"tls_ca": {ca.File}, "tls_name": {"other-cluster"}}, dcsync.Unauthenticated, `not valid for the TLS name "other-cluster"`},
		{"NoTLSNameIPHost", proxy.Addr(), url.Values{"tls_ca": {ca.File}}, dcsync.Unauthenticated, `not valid for the TLS name "127.0.0.1"`},
		{"NoClientCert", mtls.Addr(), url.Values{"tls_ca": {mtlsCA.File}, "tls_name": {tlsName}}, dcsync.Unauthenticated, "refused the TLS handshake"},
		{"UntrustedClientCert", mtls.Addr(), url.Values{"tls_ca": {mtlsCA.File}, "tls_name": {tlsName}, "tls_cert": {stranger.CertFile}, "tls_key": {stranger.KeyFile}}, dcsync.Unauthenticated, "refused the TLS handshake"},
		{"TLSToPlainPort", realServer(t), url.Values{"tls_ca": {ca.File}, "tls_name": {tlsName}}, dcsync.Connection, "does the server speak TLS on this port?"},
		{"PlainToTLSPort", proxy.Addr(), nil, dcsync.Connection, "dial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := aerospike.OpenURL(openCtx(t), tlsURL(tc.addr, tc.q))
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			if dcsync.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v (code %v); want %v saying %q", err, dcsync.CodeOf(err), tc.code, tc.says)
			}
			t.Log(err)
		})
	}
	t.Run("ClientCert", func(t *testing.T) {
		q := url.Values{"tls_ca": {mtlsCA.File}, "tls_name": {tlsName}, "tls_cert": {alice.CertFile}, "tls_key": {alice.KeyFile}}
		s, err := aerospike.OpenURL(openCtx(t), tlsURL(mtls.Addr(), q))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !mtls.SawClient("alice") {
			t.Fatal("the server never saw the client certificate")
		}
	})
}

// TestCredentialsAgainstCommunity: Aerospike Community has no security and answers a
// login with SECURITY_NOT_SUPPORTED. A client with credentials gets Unauthenticated
// saying so, and the password is nowhere in the error.
func TestCredentialsAgainstCommunity(t *testing.T) {
	const secret = "pw-Kx9-never-shown"
	t.Setenv(aerospike.PasswordEnv, secret)
	u := storeURL(realServer(t), namespace)
	u.User = url.User("alice")
	s, err := aerospike.OpenURL(openCtx(t), u)
	if err == nil {
		s.Close()
		t.Fatal("a login to a server without security succeeded")
	}
	if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), "no security") {
		t.Fatalf("got %v; want Unauthenticated saying the server has no security", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("the error shows the password: %v", err)
	}
	t.Log(err)
}

// TestSecurityParameters: what OpenURL refuses before any I/O (the host is a closed
// port), with InvalidArgument naming the fix and never the secret.
func TestSecurityParameters(t *testing.T) {
	const secret = "pw-Zq7-never-shown"
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", secret+"\n", 0o600)
	open := write("open", secret+"\n", 0o644)
	empty := write("empty", "\n", 0o600)
	notPEM := write("notpem", secret, 0o600)
	ca := tlstest.NewCA(t, dir, "params")
	pair := ca.Client(t, "alice")
	openKey := write("openkey", "x", 0o604)
	for _, tc := range []struct {
		name string
		raw  string
		env  map[string]string
		says string
	}{
		{"PasswordInURL", "aerospike://alice:" + secret + "@127.0.0.1:1/test", nil, "DCSYNC_AEROSPIKE_PASSWORD"},
		{"PasswordParameter", "aerospike://alice@127.0.0.1:1/test?password=" + secret, nil, `parameter "password" would put a secret in the URL`},
		{"TokenParameterBadPort", "aerospike://127.0.0.1:99999/test?session_token=" + secret, nil, "DCSYNC_AEROSPIKE_PASSWORD"},
		{"PasswordNoUser", "aerospike://127.0.0.1:1/test?password_file=" + good, nil, "no user"},
		{"EnvPasswordNoUser", "aerospike://127.0.0.1:1/test", map[string]string{aerospike.PasswordEnv: secret}, "no user"},
		{"UserNoPassword", "aerospike://alice@127.0.0.1:1/test", nil, "has no password"},
		{"UserTwice", "aerospike://alice@127.0.0.1:1/test?user=bob&password_file=" + good, nil, "twice"},
		{"TwoSources", "aerospike://alice@127.0.0.1:1/test?password_file=" + good, map[string]string{aerospike.PasswordEnv: secret}, "give exactly one"},
		{"TwoEnvSources", "aerospike://127.0.0.1:1/test?user=alice", map[string]string{aerospike.PasswordEnv: secret, aerospike.PasswordEnv + "_FILE": good}, "give exactly one"},
		{"WorldReadable", "aerospike://alice@127.0.0.1:1/test?password_file=" + open, nil, "chmod 600"},
		{"WorldReadableEnvFile", "aerospike://alice@127.0.0.1:1/test", map[string]string{aerospike.PasswordEnv + "_FILE": open}, "other users may read"},
		{"EmptyPassword", "aerospike://alice@127.0.0.1:1/test?password_file=" + empty, nil, "is empty"},
		{"MissingFile", "aerospike://alice@127.0.0.1:1/test?password_file=" + filepath.Join(dir, "nope"), nil, "no such file"},
		{"ExternalWithoutTLS", "aerospike://alice@127.0.0.1:1/test?auth=external&password_file=" + good, nil, "needs TLS"},
		{"UnknownAuth", "aerospike://alice@127.0.0.1:1/test?auth=kerberos&password_file=" + good, nil, "not internal, external or pki"},
		{"PKIWithoutCert", "aerospike://127.0.0.1:1/test?auth=pki&tls_ca=" + ca.File, nil, "needs a client certificate"},
		{"PKIWithUser", "aerospike://alice@127.0.0.1:1/test?auth=pki&password_file=" + good + "&tls_cert=" + pair.CertFile + "&tls_key=" + pair.KeyFile, nil, "takes no user or password"},
		{"AuthWithoutUser", "aerospike://127.0.0.1:1/test?auth=internal", nil, "needs a user"},
		{"TLSFalseWithCA", "aerospike://127.0.0.1:1/test?tls=false&tls_ca=" + ca.File, nil, "tls=false"},
		{"CertWithoutKey", "aerospike://127.0.0.1:1/test?tls_cert=" + pair.CertFile, nil, "go together"},
		{"CANotPEM", "aerospike://127.0.0.1:1/test?tls_ca=" + notPEM, nil, "no PEM certificate"},
		{"KeyWorldReadable", "aerospike://127.0.0.1:1/test?tls_cert=" + pair.CertFile + "&tls_key=" + openKey, nil, "chmod 600"},
		{"KeyNotMatching", "aerospike://127.0.0.1:1/test?tls_cert=" + pair.CertFile + "&tls_key=" + notPEM, nil, "tls_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			u, err := url.Parse(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			s, err := aerospike.OpenURL(context.Background(), u)
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			if dcsync.CodeOf(err) != dcsync.InvalidArgument || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v; want InvalidArgument saying %q", err, tc.says)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}

// TestPasswordSources: each of the three sources alone is taken (the open then fails
// at the login, as the server has no security: what matters is that it got there).
func TestPasswordSources(t *testing.T) {
	addr := realServer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := "aerospike://alice@" + addr + "/" + namespace
	for _, tc := range []struct {
		name, raw string
		env       map[string]string
	}{
		{"URLFile", base + "?password_file=" + url.QueryEscape(file), nil},
		{"Env", base, map[string]string{aerospike.PasswordEnv: "pw"}},
		{"EnvFile", base, map[string]string{aerospike.PasswordEnv + "_FILE": file}},
		{"UserParam", "aerospike://" + addr + "/" + namespace + "?user=alice&password_file=" + url.QueryEscape(file), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			u, err := url.Parse(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			s, err := aerospike.OpenURL(openCtx(t), u)
			if err == nil {
				s.Close()
				t.Fatal("a login to a server without security succeeded")
			}
			if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), `user "alice"`) && !strings.Contains(err.Error(), "no security") {
				t.Fatalf("got %v; want Unauthenticated from the login", err)
			}
		})
	}
}

// TestLoginThroughTLS: user/password (internal and external) and PKI logins through
// TLS, against the proxy's emulation of Enterprise's login (Community has no security):
// the right credentials open a store that works; a wrong password, an unknown user or
// a PKI certificate of another user is Unauthenticated, naming the user and not the
// password.
func TestLoginThroughTLS(t *testing.T) {
	const password, wrong = "right-Pw-31", "wrong-Pw-77"
	clients := tlstest.NewCA(t, t.TempDir(), "clients")
	a := &tlstest.Aerospike{Users: map[string]string{"alice": password}, PKIUser: "alice"}
	proxy, ca := tlsFront(t, clients, a)
	alice, bob := clients.Client(t, "alice"), clients.Client(t, "bob")
	base := url.Values{"tls_ca": {ca.File}, "tls_name": {tlsName}, "tls_cert": {alice.CertFile}, "tls_key": {alice.KeyFile}}
	with := func(kv ...string) url.Values {
		q := url.Values{}
		for k, v := range base {
			q[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return q
	}
	right, wrongFile := passwordFile(t, password), passwordFile(t, wrong)
	for _, tc := range []struct {
		name string
		q    url.Values
		env  string // the password in $DCSYNC_AEROSPIKE_PASSWORD
		code dcsync.Code
		says string
	}{
		{"Internal", with("user", "alice", "password_file", right), "", 0, ""},
		{"InternalEnv", with("user", "alice"), password, 0, ""},
		{"External", with("user", "alice", "auth", "external", "password_file", right), "", 0, ""},
		{"PKI", with("auth", "pki"), "", 0, ""},
		{"WrongPassword", with("user", "alice", "password_file", wrongFile), "", dcsync.Unauthenticated, `refused user "alice"`},
		{"WrongPasswordEnv", with("user", "alice"), wrong, dcsync.Unauthenticated, "$DCSYNC_AEROSPIKE_PASSWORD"},
		{"UnknownUser", with("user", "mallory", "password_file", right), "", dcsync.Unauthenticated, `refused user "mallory"`},
		{"PKIOtherUser", with("auth", "pki", "tls_cert", bob.CertFile, "tls_key", bob.KeyFile), "", dcsync.Unauthenticated, "client certificate"},
		{"NoCredentials", with(), "", dcsync.Unauthenticated, "without credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(aerospike.PasswordEnv, tc.env)
			}
			s, err := aerospike.OpenURL(openCtx(t), tlsURL(proxy.Addr(), tc.q))
			if tc.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				ctx := openCtx(t)
				k := dcsync.Key{Client: "sec", Farm: "dc1", Name: unique("login"), Level: dcsync.DC}
				st, err := s.AcquireLock(ctx, k, "owner", 30*time.Second)
				if err != nil {
					t.Fatalf("acquire after login: %v", err)
				}
				if err := s.ReleaseLock(ctx, k, "owner"); err != nil {
					t.Fatalf("release after login: %v (token %d)", err, st.Token)
				}
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			if dcsync.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v (code %v); want %v saying %q", err, dcsync.CodeOf(err), tc.code, tc.says)
			}
			if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), wrong) {
				t.Fatalf("the error shows a password: %v", err)
			}
			t.Log(err)
		})
	}
}

// TestRefusedDuringOperations: a server that refuses the user's commands once the
// store is open (a role revoked: ROLE_VIOLATION; a session that cannot be renewed:
// NOT_AUTHENTICATED) makes operations fail with Unauthenticated, not Internal, and
// without retrying as if the network had failed.
func TestRefusedDuringOperations(t *testing.T) {
	const password = "ops-pw"
	a := &tlstest.Aerospike{Users: map[string]string{"ops": password}}
	proxy, ca := tlsFront(t, nil, a)
	u := tlsURL(proxy.Addr(), url.Values{"tls_ca": {ca.File}, "tls_name": {tlsName}, "user": {"ops"}, "password_file": {passwordFile(t, password)}})
	s, err := aerospike.OpenURL(openCtx(t), u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := openCtx(t)
	k := dcsync.Key{Client: "sec", Farm: "dc1", Name: unique("ops"), Level: dcsync.DC}
	if _, err := s.AcquireLock(ctx, k, "owner", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, rc := range []int{81, 80} { // ROLE_VIOLATION, NOT_AUTHENTICATED
		a.Deny(rc)
		_, err := s.InspectLock(ctx, k)
		if !errors.Is(err, dcsync.ErrUnauthenticated) {
			t.Fatalf("result code %d: got %v; want Unauthenticated", rc, err)
		}
		t.Log(err)
	}
	a.Deny(0)
	if err := s.ReleaseLock(ctx, k, "owner"); err != nil {
		t.Fatal(err)
	}
}
