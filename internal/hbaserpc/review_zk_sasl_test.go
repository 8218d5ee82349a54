package hbaserpc

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/asn1tools"
	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/dcsync/dcsync"
)

// Review tests of the SASL-mode ZooKeeper client (zk_sasl.go), offline: a credential
// cache written here holds a TGT and a service ticket for reviewZKSPN whose session
// key the fake ZooKeeper below knows, so the whole SASL GSSAPI exchange (AP-REQ,
// AP-REP, security layer) runs without a KDC. Each test fails on a defect a user
// would see.

const (
	reviewRealm = "REVIEW.TEST"
	reviewZKSPN = "zookeeper/zk.review.test"
)

// reviewKrb is the offline Kerberos setup: krb5.conf, the credential cache, and the
// session key of the ZooKeeper service ticket in it.
type reviewKrb struct {
	conf, ccache string
	key          types.EncryptionKey
}

func newReviewKrb(t *testing.T) *reviewKrb {
	t.Helper()
	dir := t.TempDir()
	kv := make([]byte, 16)
	if _, err := rand.Read(kv); err != nil {
		t.Fatal(err)
	}
	k := &reviewKrb{
		conf:   filepath.Join(dir, "krb5.conf"),
		ccache: filepath.Join(dir, "ccache"),
		key:    types.EncryptionKey{KeyType: 17, KeyValue: kv}, // aes128-cts-hmac-sha1-96
	}
	conf := "[libdefaults]\n default_realm = " + reviewRealm + "\n dns_lookup_kdc = false\n dns_lookup_realm = false\n" +
		"[realms]\n " + reviewRealm + " = {\n  kdc = 127.0.0.1:1\n }\n"
	if err := os.WriteFile(k.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// MIT ccache format 4: 0x0504, an empty header, the default principal, credentials.
	client := types.PrincipalName{NameType: 1, NameString: []string{"client"}}
	b := []byte{5, 4, 0, 0}
	b = appendCCPrincipal(b, client)
	now := time.Now()
	for _, sname := range []types.PrincipalName{
		{NameType: 2, NameString: []string{"krbtgt", reviewRealm}},
		{NameType: 2, NameString: strings.Split(reviewZKSPN, "/")},
	} {
		tkt := messages.Ticket{TktVNO: 5, Realm: reviewRealm, SName: sname,
			EncPart: types.EncryptedData{EType: 17, KVNO: 1, Cipher: []byte("opaque to the client")}}
		tb, err := tkt.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		b = appendCCPrincipal(b, client)
		b = appendCCPrincipal(b, sname)
		b = binary.BigEndian.AppendUint16(b, uint16(k.key.KeyType))
		b = appendCCData(b, k.key.KeyValue)
		for _, ts := range []time.Time{now.Add(-time.Minute), now.Add(-time.Minute), now.Add(time.Hour), now.Add(time.Hour)} {
			b = binary.BigEndian.AppendUint32(b, uint32(ts.Unix()))
		}
		b = append(b, 0)                        // is_skey
		b = binary.BigEndian.AppendUint32(b, 0) // ticket flags
		b = binary.BigEndian.AppendUint32(b, 0) // addresses
		b = binary.BigEndian.AppendUint32(b, 0) // authdata
		b = appendCCData(b, tb)
		b = appendCCData(b, nil) // second ticket
	}
	if err := os.WriteFile(k.ccache, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

func appendCCPrincipal(b []byte, p types.PrincipalName) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(p.NameType))
	b = binary.BigEndian.AppendUint32(b, uint32(len(p.NameString)))
	b = appendCCData(b, []byte(reviewRealm))
	for _, s := range p.NameString {
		b = appendCCData(b, []byte(s))
	}
	return b
}

func appendCCData(b, v []byte) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(v))), v...)
}

// kerberos is the client side: the cache, ZooKeeper SASL on, the fake's principal.
func (k *reviewKrb) kerberos() *Kerberos {
	return &Kerberos{CCache: k.ccache, Krb5Conf: k.conf, ZooKeeper: true, ZKServicePrincipal: reviewZKSPN}
}

// client is a Client logged in with k, as Dial makes it, without Dial's lookup.
func (k *reviewKrb) client(t *testing.T, cfg Config) *Client {
	t.Helper()
	cfg.Kerberos = k.kerberos()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.krb, err = cfg.Kerberos.login(); err != nil {
		t.Fatalf("login from the test credential cache: %v", err)
	}
	c := newClient(cfg)
	t.Cleanup(func() { c.Close() })
	return c
}

// reviewZK is a fake ZooKeeper server that requires SASL GSSAPI with the session
// key of k, then serves one znode.
type reviewZK struct {
	t   *testing.T
	ln  net.Listener
	key types.EncryptionKey

	silent    bool  // accept the connection, read, never answer (a frozen server)
	drop      int   // close this many connections after their ConnectRequest (a restart)
	noSASL    bool  // answer the AP-REQ with a null token, as a ZooKeeper without a SASL login does
	getDataEr int32 // answer getData with this error code (0: the znode)
	data      []byte

	mu       sync.Mutex
	getDatas int
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newReviewZK(t *testing.T, k *reviewKrb, setup func(z *reviewZK)) *reviewZK {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z := &reviewZK{t: t, ln: ln, key: k.key}
	if setup != nil {
		setup(z)
	}
	z.wg.Add(1)
	go z.accept()
	t.Cleanup(z.close)
	return z
}

func (z *reviewZK) addr() string { return z.ln.Addr().String() }

func (z *reviewZK) getDataCount() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.getDatas
}

func (z *reviewZK) close() {
	z.ln.Close()
	z.mu.Lock()
	for _, c := range z.conns {
		c.Close()
	}
	z.mu.Unlock()
	z.wg.Wait()
}

func (z *reviewZK) accept() {
	defer z.wg.Done()
	for {
		nc, err := z.ln.Accept()
		if err != nil {
			return
		}
		z.mu.Lock()
		z.conns = append(z.conns, nc)
		z.mu.Unlock()
		z.wg.Add(1)
		go z.serve(nc)
	}
}

func (z *reviewZK) serve(nc net.Conn) {
	defer z.wg.Done()
	defer nc.Close()
	r := bufio.NewReader(nc)
	if _, err := readFrame(r); err != nil {
		return
	}
	z.mu.Lock()
	drop := z.drop > 0
	if drop {
		z.drop--
	}
	z.mu.Unlock()
	if drop {
		return
	}
	if z.silent {
		_, _ = io.Copy(io.Discard, r) // until the client gives up and closes
		return
	}
	resp := binary.BigEndian.AppendUint32(nil, 0)
	resp = binary.BigEndian.AppendUint32(resp, zkSessionTimeoutMs)
	resp = binary.BigEndian.AppendUint64(resp, 7)
	resp = appendJuteBuffer(resp, make([]byte, 16))
	if !writeZKFrame(nc, resp) {
		return
	}
	step := 0
	for {
		req, err := readFrame(r)
		if err != nil || len(req) < 8 {
			return
		}
		xid := binary.BigEndian.Uint32(req[0:4])
		op := int32(binary.BigEndian.Uint32(req[4:8]))
		hdr := func(code int32) []byte {
			b := binary.BigEndian.AppendUint32(nil, xid)
			b = binary.BigEndian.AppendUint64(b, 1)
			return binary.BigEndian.AppendUint32(b, uint32(code))
		}
		switch op {
		case zksOpSASL:
			d := juteReader{b: req[8:]}
			tok := d.buffer()
			var out []byte
			switch {
			case z.noSASL:
			case step == 0:
				out = z.apRep(tok)
			case step == 1:
				out = z.offer()
			}
			step++
			b := hdr(0)
			if out == nil {
				b = binary.BigEndian.AppendUint32(b, 0xffffffff) // null buffer
			} else {
				b = appendJuteBuffer(b, out)
			}
			if !writeZKFrame(nc, b) {
				return
			}
		case zksOpGetData:
			z.mu.Lock()
			z.getDatas++
			z.mu.Unlock()
			if step < 3 {
				writeZKFrame(nc, hdr(zksErrSessionRequiresSASL))
				return
			}
			if z.getDataEr != 0 {
				if !writeZKFrame(nc, hdr(z.getDataEr)) {
					return
				}
				continue
			}
			b := appendJuteBuffer(hdr(0), z.data)
			b = append(b, make([]byte, 68)...) // a zero Stat
			if !writeZKFrame(nc, b) {
				return
			}
		case zksOpCloseSession:
			writeZKFrame(nc, hdr(0))
			return
		default:
			if !writeZKFrame(nc, hdr(-6)) {
				return
			}
		}
	}
}

// reviewEncAPRepPart is EncAPRepPart without the optional fields.
type reviewEncAPRepPart struct {
	CTime time.Time `asn1:"generalized,explicit,tag:0"`
	Cusec int       `asn1:"explicit,tag:1"`
}

// apRep answers the client's GSS initial token (AP-REQ) with the AP-REP that proves
// the fake holds the session key.
func (z *reviewZK) apRep(tok []byte) []byte {
	var k5 spnego.KRB5Token
	if err := k5.Unmarshal(tok); err != nil || !k5.IsAPReq() {
		z.t.Errorf("fake ZooKeeper: the first SASL token is not an AP-REQ: %v", err)
		return nil
	}
	if err := k5.APReq.DecryptAuthenticator(z.key); err != nil {
		z.t.Errorf("fake ZooKeeper: authenticator: %v", err)
		return nil
	}
	a := k5.APReq.Authenticator
	pb, err := asn1.Marshal(reviewEncAPRepPart{CTime: a.CTime.UTC(), Cusec: a.Cusec})
	if err != nil {
		z.t.Errorf("fake ZooKeeper: %v", err)
		return nil
	}
	ed, err := crypto.GetEncryptedData(asn1tools.AddASNAppTag(pb, 27), z.key, keyusage.AP_REP_ENCPART, 0)
	if err != nil {
		z.t.Errorf("fake ZooKeeper: %v", err)
		return nil
	}
	rb, err := asn1.Marshal(messages.APRep{PVNO: 5, MsgType: 15, EncPart: ed})
	if err != nil {
		z.t.Errorf("fake ZooKeeper: %v", err)
		return nil
	}
	oid, _ := asn1.Marshal(asn1.ObjectIdentifier{1, 2, 840, 113554, 1, 2, 2}) // Kerberos V5
	return asn1tools.AddASNAppTag(append(append(oid, 2, 0), asn1tools.AddASNAppTag(rb, 15)...), 0)
}

// offer is the acceptor's security layer offer: auth, integrity, privacy, 64 KiB.
func (z *reviewZK) offer() []byte {
	et, err := crypto.GetEtype(z.key.KeyType)
	if err != nil {
		z.t.Errorf("fake ZooKeeper: %v", err)
		return nil
	}
	wt := gssapi.WrapToken{Flags: 0x01, EC: uint16(et.GetHMACBitLength() / 8), Payload: []byte{0x07, 0x00, 0x10, 0x00}}
	if err := wt.SetCheckSum(z.key, keyusage.GSSAPI_ACCEPTOR_SEAL); err != nil {
		z.t.Errorf("fake ZooKeeper: %v", err)
		return nil
	}
	b, err := wt.Marshal()
	if err != nil {
		z.t.Errorf("fake ZooKeeper: %v", err)
		return nil
	}
	return b
}

// masterZNode is an HBase master znode naming addr (metadata, PBUF, protobuf).
func masterZNode(t *testing.T, addr string) []byte {
	z := &fakeZK{t: t, nodes: map[string][]byte{}}
	z.setServer("/hbase/master", addr, true)
	return z.nodes["/hbase/master"]
}

// metaZNode is an HBase meta-region-server znode naming addr.
func metaZNode(t *testing.T, addr string) []byte {
	z := &fakeZK{t: t, nodes: map[string][]byte{}}
	z.setServer("/hbase/meta-region-server", addr, false)
	return z.nodes["/hbase/meta-region-server"]
}

// TestReviewZKFakeExchange checks the offline setup itself: the SASL-mode lookup
// authenticates with the fake and reads the master znode.
func TestReviewZKFakeExchange(t *testing.T) {
	k := newReviewKrb(t)
	z := newReviewZK(t, k, func(z *reviewZK) { z.data = masterZNode(t, "master.example:16000") })
	c := k.client(t, Config{ZKQuorum: z.addr()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, err := c.lookupMaster(ctx)
	if err != nil || addr != "master.example:16000" {
		t.Fatalf("lookupMaster = %q, %v; want master.example:16000", addr, err)
	}
}

// TestReviewZKQuorumSkipsSilentServer: with a quorum of two servers whose first
// accepts connections but never answers (a frozen ZooKeeper process: the kernel
// still completes the TCP handshake), the lookup should be answered by the second.
// zkSASLGet gives all servers one shared deadline (max(DialTimeout, 2s)+5s) and tries
// them always in the listed order: the silent first server eats the whole budget,
// the second is dialled with an expired context, and every retry repeats it, so no
// lookup ever succeeds while the first server is frozen (go-zookeeper, the
// non-SASL path, shuffles the servers and gets through on a retry).
func TestReviewZKQuorumSkipsSilentServer(t *testing.T) {
	k := newReviewKrb(t)
	silent := newReviewZK(t, k, func(z *reviewZK) { z.silent = true })
	good := newReviewZK(t, k, func(z *reviewZK) { z.data = masterZNode(t, "master.example:16000") })
	c := k.client(t, Config{ZKQuorum: silent.addr() + "," + good.addr(), DialTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < 3; i++ { // a retry loop's attempts
		addr, err := c.lookupMaster(ctx)
		if err == nil {
			if addr != "master.example:16000" {
				t.Fatalf("lookupMaster = %q; want master.example:16000", addr)
			}
			return
		}
		t.Logf("attempt %d: %v", i+1, err)
	}
	t.Fatalf("three lookups failed with the second server of the quorum healthy (it saw %d getData)", good.getDataCount())
}

// TestReviewZKTransientErrorCodeRetried: a ZooKeeper reply with an error code the
// client does not name (here THROTTLEDOP, -127, which ZooKeeper 3.6+ sends for a
// request it dropped under load; the same for any other) is a zkError, which the
// retry loop classifies as fatal and toDcsync turns into Internal: Dial fails at
// once with "internal: zookeeper error code -127". The non-SASL path makes every
// failed read a connError (Connection, retried). Want: retried, and not Internal.
func TestReviewZKTransientErrorCodeRetried(t *testing.T) {
	k := newReviewKrb(t)
	z := newReviewZK(t, k, func(z *reviewZK) { z.getDataEr = -127 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, Config{ZKQuorum: z.addr(), Kerberos: k.kerberos(), MaxAttempts: 3, BackoffBase: time.Millisecond})
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded against a ZooKeeper that throttles every read")
	}
	t.Log(err)
	if code := dcsync.CodeOf(err); code == dcsync.Internal {
		t.Errorf("Dial: %v; code %v, want a retryable Connection-class error, not Internal", err, code)
	}
	if n := z.getDataCount(); n < 2 {
		t.Errorf("the throttled read was tried %d time(s); want it retried", n)
	}
}

// TestReviewZKNoSASLServerNamed: zk_sasl=true against a ZooKeeper that has no SASL
// login (no JAAS Server section: it answers the SASL request with success and a null
// token, as ZooKeeperServer.processSasl does when the connection has no SASL server)
// fails Unauthenticated, but the message names neither ZooKeeper nor zk_sasl:
// "127.0.0.1:N answered the Kerberos AP-REQ with something else: error unmarshalling
// KRB5Token OID: ...". Want the cause named (ZooKeeper does not do SASL: drop zk_sasl).
func TestReviewZKNoSASLServerNamed(t *testing.T) {
	k := newReviewKrb(t)
	z := newReviewZK(t, k, func(z *reviewZK) { z.noSASL = true })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, Config{ZKQuorum: z.addr(), Kerberos: k.kerberos(), MaxAttempts: 2, BackoffBase: time.Millisecond})
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded")
	}
	t.Log(err)
	if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), "ZooKeeper") || !strings.Contains(err.Error(), "zk_sasl") {
		t.Errorf("Dial: %v; want Unauthenticated naming ZooKeeper and zk_sasl", err)
	}
}

// TestReviewZKPrincipalCheckedBeforeIO: a ZooKeeper principal that is not
// service/host is a parameter error, InvalidArgument before any I/O (as a bad
// server_principal is, in login). zkServicePrincipal checks it only after a
// ZooKeeper server has accepted a session, so with the quorum out of reach Dial
// retries and fails with a Connection-class error instead, hiding the bad parameter.
func TestReviewZKPrincipalCheckedBeforeIO(t *testing.T) {
	k := newReviewKrb(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	kr := k.kerberos()
	kr.ZKServicePrincipal = "zookeeper"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, Config{ZKQuorum: closed, Kerberos: kr, MaxAttempts: 2, BackoffBase: time.Millisecond})
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded")
	}
	if dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Errorf("Dial with zk_server_principal=zookeeper: %v; want InvalidArgument before any I/O", err)
	}
}

// TestReviewZKHostCanonicalized: the docs (docs/stores/hbase.md, Kerberos's doc) say
// _HOST becomes the ZooKeeper server's host name "as the Java client's
// zookeeper.sasl.client.canonicalize.hostname", whose rule (SaslServerPrincipal) is
// the canonical name of the resolved address for a host name too, not only for an
// IP literal. zkServicePrincipal canonicalizes IP literals only, so a quorum given
// by short names or aliases (zk1 for zk1.example.com, a CNAME) asks the KDC for
// zookeeper/zk1, which it does not know, where the Java client asks for
// zookeeper/zk1.example.com. Here: the machine's host name, when its address's
// name differs from it.
func TestReviewZKHostCanonicalized(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil || len(addrs) == 0 {
		t.Skipf("%s does not resolve: %v", host, err)
	}
	names, err := net.DefaultResolver.LookupAddr(ctx, addrs[0])
	if err != nil || len(names) == 0 {
		t.Skipf("%s has no name: %v", addrs[0], err)
	}
	canonical := strings.ToLower(strings.TrimSuffix(names[0], "."))
	if canonical == strings.ToLower(host) {
		t.Skipf("%s is its own canonical name here", host)
	}
	c := &Client{cfg: Config{}}
	got, err := c.zkServicePrincipal(ctx, net.JoinHostPort(host, "2181"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "zookeeper/" + canonical; got != want {
		t.Errorf("zkServicePrincipal(%s:2181) = %q; want %q (the Java client's canonical name)", host, got, want)
	}
}

// TestReviewZKNoSASLServerNamedReal is TestReviewZKNoSASLServerNamed against the real
// (non-secure) ZooKeeper of DCSYNC_HBASE_ZK, which has no SASL login: the offline
// credentials are enough to send it an AP-REQ, and its answer is what the fake
// models.
func TestReviewZKNoSASLServerNamedReal(t *testing.T) {
	zk := zkQuorum(t)
	k := newReviewKrb(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, Config{ZKQuorum: zk, Kerberos: k.kerberos(), MaxAttempts: 2, BackoffBase: time.Millisecond})
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded")
	}
	t.Log(err)
	if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), "ZooKeeper") || !strings.Contains(err.Error(), "zk_sasl") {
		t.Errorf("Dial: %v; want Unauthenticated naming ZooKeeper and zk_sasl", err)
	}
}

// TestReviewZKQuorumSkipsSilentServerReal is TestReviewZKQuorumSkipsSilentServer with
// the real SASL-requiring ZooKeeper (up-secure, DCSYNC_HBASE_SECURE_ZK_SASL=1) as the
// second server of the quorum: Dial should succeed through it.
func TestReviewZKQuorumSkipsSilentServerReal(t *testing.T) {
	env := loadZKSASLEnv(t)
	silent := newReviewZK(t, newReviewKrb(t), func(z *reviewZK) { z.silent = true })
	cfg := env.config(t)
	cfg.Kerberos.ZooKeeper = true
	cfg.ZKQuorum = silent.addr() + "," + env.zk
	cfg.MaxAttempts = 3
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial with the first ZooKeeper frozen and the second healthy: %v", err)
	}
	c.Close()
}

// TestReviewZKReadFailureNotInDoubt: a ZooKeeper read changes nothing, so a failed
// one is safe to retry whatever the operation that needed it. zkSession.read and
// write mark their connErrors sent (in doubt), so when the lookup of hbase:meta's
// location runs inside a non-idempotent operation (onRegion's retry with
// idempotent=false: a CheckAndMutate, as every lock acquire is) and a ZooKeeper
// server drops the connection (a restart), the operation fails at once as
// "Connection: outcome unknown" although nothing was sent to HBase, and is not
// retried. The non-SASL path (zkGet with go-zookeeper) returns connErrors not sent:
// retried. Here: the first connection is dropped after its ConnectRequest, the
// second would answer.
func TestReviewZKReadFailureNotInDoubt(t *testing.T) {
	k := newReviewKrb(t)
	z := newReviewZK(t, k, func(z *reviewZK) {
		z.drop = 1
		z.data = metaZNode(t, "meta.example:16020")
	})
	c := k.client(t, Config{ZKQuorum: z.addr(), BackoffBase: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var addr string
	err := c.retry(ctx, "hbase.CheckAndMutate", false, func(ctx context.Context) error {
		var err error
		addr, err = c.metaLocation(ctx) // what locate does first, with no location cached
		return err
	})
	if err != nil || addr != "meta.example:16020" {
		t.Fatalf("a non-idempotent operation's meta lookup after one dropped ZooKeeper connection: %q, %v; want it retried and found", addr, err)
	}
}
