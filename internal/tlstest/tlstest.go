// Package tlstest makes what the TLS tests need: a throwaway certificate authority,
// server and client certificates it signs (also written as PEM files, for store URLs'
// tls_ca, tls_cert and tls_key), and Proxy, a TLS-terminating proxy that forwards the
// decrypted bytes to a plain TCP server. Aerospike Community has no TLS: with the proxy
// in front of it, a client speaks real TLS (handshake, certificate checks, encrypted
// records) to a real server.
//
// It is test support: imported by tests only.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	// Cert is the authority's certificate, and File the PEM file holding it.
	Cert *x509.Certificate
	File string

	key *ecdsa.PrivateKey
	dir string
	n   atomic.Int64
}

// NewCA makes an authority named name, writing its PEM files in dir.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, dir: dir}
	ca.n.Store(1)
	ca.File = writePEM(t, dir, name+"-ca.pem", "CERTIFICATE", der, 0o644)
	return ca
}

// Pair is a certificate the CA signed, with its key, in memory and in PEM files (the
// key file has mode 0600).
type Pair struct {
	TLS               tls.Certificate
	CertFile, KeyFile string
}

// Server returns a server certificate valid for names (DNS names, or IP addresses).
func (ca *CA) Server(t testing.TB, names ...string) Pair {
	t.Helper()
	tmpl := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	if len(names) > 0 {
		tmpl.Subject.CommonName = names[0]
	}
	return ca.sign(t, tmpl, "server")
}

// Client returns a client certificate with common name cn (Aerospike PKI's user).
func (ca *CA) Client(t testing.TB, cn string) Pair {
	t.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	return ca.sign(t, tmpl, "client-"+cn)
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func (ca *CA) sign(t testing.TB, tmpl *x509.Certificate, base string) Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial := ca.n.Add(1)
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(ca.File[:len(ca.File)-len("-ca.pem")]) + "-" + base + "-" + big.NewInt(serial).String()
	p := Pair{
		CertFile: writePEM(t, ca.dir, name+".pem", "CERTIFICATE", der, 0o644),
		KeyFile:  writePEM(t, ca.dir, name+"-key.pem", "PRIVATE KEY", keyDER, 0o600),
	}
	p.TLS = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return p
}

func writePEM(t testing.TB, dir, name, typ string, der []byte, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return path
}

// Proxy accepts TLS connections and forwards what they carry to a plain TCP target.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	handshakes, failures atomic.Int64
	lastErr              error      // the last failed handshake's, under mu
	peers                sync.Map   // client certificate common names seen
	as                   *Aerospike // nil: bytes are forwarded as they are
}

// NewProxy starts a proxy on 127.0.0.1 (a port of its own) in front of target with the
// server side of cfg (its Certificates; ClientAuth and ClientCAs for mutual TLS). It
// forwards bytes as they are. It is closed when the test ends.
func NewProxy(t testing.TB, target string, cfg *tls.Config) *Proxy {
	t.Helper()
	p := newProxy(t, target)
	p.start(cfg)
	return p
}

// testingTB is testing.TB, named for the files of this package.
type testingTB = testing.TB

func newProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) start(cfg *tls.Config) {
	p.wg.Add(1)
	go p.accept(cfg)
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Handshakes returns the number of TLS handshakes that succeeded and failed.
func (p *Proxy) Handshakes() (ok, failed int64) { return p.handshakes.Load(), p.failures.Load() }

// LastFailure returns the error of the last failed handshake, as the server side saw it.
func (p *Proxy) LastFailure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// SawClient reports whether a client presented a certificate with common name cn.
func (p *Proxy) SawClient(cn string) bool {
	_, ok := p.peers.Load(cn)
	return ok
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) accept(cfg *tls.Config) {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(tls.Server(c, cfg), c)
	}
}

func (p *Proxy) serve(tc *tls.Conn, raw net.Conn) {
	defer p.wg.Done()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		p.failures.Add(1)
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		p.forget(raw)
		return
	}
	_ = raw.SetDeadline(time.Time{})
	p.handshakes.Add(1)
	for _, c := range tc.ConnectionState().PeerCertificates {
		p.peers.Store(c.Subject.CommonName, true)
	}
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.forget(raw)
		return
	}
	if !p.track(s) {
		p.forget(raw)
		return
	}
	p.wg.Add(1)
	if p.as != nil {
		c := &asConn{a: p.as, client: tc}
		go func() {
			defer p.wg.Done()
			_ = c.requests(s)
			p.forget(raw, s)
		}()
		_ = c.replies(s)
		p.forget(raw, s)
		return
	}
	go func() {
		defer p.wg.Done()
		_, _ = io.Copy(s, tc)
		p.forget(raw, s)
	}()
	_, _ = io.Copy(tc, s)
	p.forget(raw, s)
}

// Close stops the proxy and closes every connection through it, and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
