package hbaserpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jcmturner/gokrb5/v8/asn1tools"
	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/chksumtype"
	"github.com/jcmturner/gokrb5/v8/iana/flags"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/krberror"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/secure"
)

// Kerberos configures SASL GSSAPI (Kerberos) authentication of every connection to
// HBase's region servers and master, as HBase's Java client does with
// hbase.security.authentication=kerberos. Only the "authentication" quality of
// protection (hbase.rpc.protection) is spoken: a cluster that requires integrity or
// privacy is refused with a message saying so (TLS, Config.TLS, protects the
// traffic instead). ZooKeeper is reached without authentication unless ZooKeeper
// is set.
type Kerberos struct {
	// Principal is the client's principal, "name@REALM" or "name" (the default realm
	// of krb5.conf). Required with Keytab; with the credential cache it defaults to
	// the cache's principal (and must match it when given).
	Principal string
	// Keytab is the path of a keytab holding Principal's keys (a secret file: refused
	// when others may read it). With a keytab the client logs in itself and renews its
	// ticket for as long as it runs. "" uses the credential cache.
	Keytab string
	// CCache is the path of the credential cache to use without a keytab (kinit's).
	// Default $KRB5CCNAME (a "FILE:" prefix is accepted), else /tmp/krb5cc_UID. A ticket
	// from a cache is not renewed by dcsync: it lasts as long as kinit made it.
	CCache string
	// Krb5Conf is the path of krb5.conf. Default $KRB5_CONFIG, else /etc/krb5.conf.
	Krb5Conf string
	// ServicePrincipal is HBase's principal (hbase.regionserver.kerberos.principal),
	// "service/host[@REALM]"; "_HOST" in it stands for the host name of the server
	// being connected to, as HBase advertises it (lower case). Default "hbase/_HOST".
	// The realm is taken from krb5.conf's domain_realm for the host (else the
	// client's), whatever the "@REALM" part says.
	ServicePrincipal string
	// ZooKeeper, when set, authenticates the ZooKeeper sessions too (SASL GSSAPI, as
	// ZooKeeper's Java client does with a JAAS "Client" section), for a quorum that
	// requires SASL of every client. Unset, ZooKeeper is read without authentication.
	ZooKeeper bool
	// ZKServicePrincipal is ZooKeeper's principal, "service/host[@REALM]", "_HOST"
	// standing for the ZooKeeper server's host name in lower case (an IP address in
	// the quorum is first resolved to its name). Default "zookeeper/_HOST".
	ZKServicePrincipal string
}

// krbAuth is a logged-in Kerberos client: the Client's credentials for every
// connection's GSSAPI exchange.
type krbAuth struct {
	cl        *client.Client
	principal string // the client's principal, name@REALM (the connection header's user)
	service   string // the service principal pattern, without realm
	source    string // where the credentials came from, for messages ("keytab /path")
}

// kerberosOp names Kerberos failures.
const kerberosOp = "hbase.kerberos"

// login reads k's krb5.conf and credentials and obtains a ticket-granting ticket
// (from the KDC with a keytab, from the cache otherwise). Its errors are
// InvalidArgument (a file that cannot be read), Unauthenticated (the KDC refused
// the credentials, an expired cache) or Connection (the KDC cannot be reached).
func (k *Kerberos) login() (*krbAuth, error) {
	confPath := k.Krb5Conf
	if confPath == "" {
		confPath = os.Getenv("KRB5_CONFIG")
	}
	if confPath == "" {
		confPath = "/etc/krb5.conf"
	}
	kconf, err := config.Load(confPath)
	if err != nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, kerberosOp, "krb5.conf %q (krb5_conf, $KRB5_CONFIG): %v", confPath, err)
	}
	service := k.ServicePrincipal
	if service == "" {
		service = "hbase/_HOST"
	}
	service, _, _ = strings.Cut(service, "@")
	if !strings.Contains(service, "/") {
		return nil, driver.Errorf(dcsync.InvalidArgument, kerberosOp, "server principal %q is not service/host", k.ServicePrincipal)
	}
	if zk, _, _ := strings.Cut(k.ZKServicePrincipal, "@"); k.ZooKeeper && zk != "" && !strings.Contains(zk, "/") {
		return nil, driver.Errorf(dcsync.InvalidArgument, kerberosOp, "ZooKeeper principal %q is not service/host (zk_server_principal)", k.ZKServicePrincipal)
	}
	settings := []func(*client.Settings){client.DisablePAFXFAST(true)}
	a := &krbAuth{service: service}
	if k.Keytab != "" {
		name, realm, _ := strings.Cut(k.Principal, "@")
		if name == "" {
			return nil, driver.Errorf(dcsync.InvalidArgument, kerberosOp, "a keytab needs a principal (principal=name@REALM)")
		}
		if realm == "" {
			realm = kconf.LibDefaults.DefaultRealm
		}
		b, err := secure.ReadFile(kerberosOp, "keytab", k.Keytab)
		if err != nil {
			return nil, err
		}
		kt := keytab.New()
		if err := kt.Unmarshal(b); err != nil {
			return nil, driver.Errorf(dcsync.InvalidArgument, kerberosOp, "keytab %q is not a keytab: %v", k.Keytab, err)
		}
		a.principal = name + "@" + realm
		a.source = fmt.Sprintf("keytab %q", k.Keytab)
		a.cl = client.NewWithKeytab(name, realm, kt, kconf, settings...)
		if err := a.cl.Login(); err != nil {
			a.cl.Destroy()
			return nil, a.loginError(err)
		}
		return a, nil
	}
	path := k.CCache
	if path == "" {
		path = os.Getenv("KRB5CCNAME")
	}
	if path == "" {
		path = fmt.Sprintf("/tmp/krb5cc_%d", os.Getuid())
	}
	path = strings.TrimPrefix(path, "FILE:")
	if strings.Contains(path, ":") && !strings.HasPrefix(path, "/") {
		return nil, driver.Errorf(dcsync.InvalidArgument, kerberosOp, "credential cache %q: only file caches are supported (FILE:/path)", path)
	}
	a.source = fmt.Sprintf("credential cache %q", path)
	b, err := secure.ReadFile(kerberosOp, "credential cache", path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "no Kerberos credentials: no keytab (keytab=) and no credential cache %q (run kinit, or set $KRB5CCNAME)", path)
		}
		return nil, err
	}
	cc := new(credentials.CCache)
	if err := cc.Unmarshal(b); err != nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, kerberosOp, "%s is not a credential cache: %v", a.source, err)
	}
	a.principal = strings.Join(cc.DefaultPrincipal.PrincipalName.NameString, "/") + "@" + cc.DefaultPrincipal.Realm
	if k.Principal != "" && k.Principal != a.principal && k.Principal+"@"+cc.DefaultPrincipal.Realm != a.principal {
		return nil, driver.Errorf(dcsync.InvalidArgument, kerberosOp, "%s holds the tickets of %s, not of principal %s", a.source, a.principal, k.Principal)
	}
	a.cl, err = client.NewFromCCache(cc, kconf, settings...)
	if err != nil {
		return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s of %s: %v (run kinit)", a.source, a.principal, err)
	}
	if err := a.cl.AffirmLogin(); err != nil {
		a.cl.Destroy()
		return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "the ticket of %s in %s has expired (run kinit, or use a keytab): %v", a.principal, a.source, err)
	}
	return a, nil
}

// loginError classifies a failed login or ticket request: the KDC out of reach is
// Connection, anything the KDC said is Unauthenticated.
func (a *krbAuth) loginError(err error) error {
	var ke krberror.Krberror
	if errors.As(err, &ke) && ke.RootCause == krberror.NetworkingError {
		return driver.Errorf(dcsync.Connection, kerberosOp, "the KDC cannot be reached (krb5.conf's kdc for the realm): %v", err)
	}
	return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "the KDC refused %s with %s (a wrong or stale keytab, an unknown principal?): %v", a.principal, a.source, err)
}

// close stops the ticket renewal.
func (a *krbAuth) close() { a.cl.Destroy() }

// servicePrincipal returns the service principal for the server at addr.
func (a *krbAuth) servicePrincipal(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return strings.ReplaceAll(a.service, "_HOST", strings.ToLower(host))
}

// SASL codes of HBase's connection preamble and exchange.
const (
	authKerberos      = 0x51 // AuthMethod.KERBEROS
	saslStatusSuccess = 0
	saslStatusError   = 1
	saslSwitchSimple  = -88 // SaslUtil.SWITCH_TO_SIMPLE_AUTH
	maxSASLToken      = 1 << 20
	qopAuth           = 1 // the "auth" bit of the GSSAPI security layer
)

// krb5OIDHeader is the DER encoding of the Kerberos V5 mechanism's OID
// (1.2.840.113554.1.2.2), which opens a GSS-API initial context token (RFC 2743 3.1).
var krb5OIDHeader = []byte{0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02}

// handshake authenticates the connection nc with SASL GSSAPI (RFC 4752), after the
// preamble and before the connection header, as HBase's SASL client does: each
// client token is sent as a 4-byte length and the bytes; each server reply is a
// 4-byte status (0: success, else a Java exception's class and message follow) and
// a length-prefixed token. Steps: the AP-REQ (mutual authentication asked), the
// server's AP-REP (checked: the server knows the service key), an empty token, the
// server's security-layer offer (a GSS wrap token), and the client's choice,
// "auth" only. nc's deadlines bound it.
func (a *krbAuth) handshake(nc net.Conn, addr string) error {
	r := bufio.NewReader(nc)
	step := func(tok []byte, last bool) ([]byte, error) {
		if err := writeSASLToken(nc, tok); err != nil {
			return nil, &connError{err: fmt.Errorf("sasl with %s: %w", addr, err)}
		}
		if last {
			return nil, nil
		}
		return readSASLReply(r, addr)
	}
	if err := a.gssapi(a.servicePrincipal(addr), "HBase", addr, step); err != nil {
		return err
	}
	if r.Buffered() > 0 {
		return &connError{err: fmt.Errorf("sasl with %s: %d unexpected bytes after the exchange", addr, r.Buffered())}
	}
	return nil
}

// gssapi runs the client side of SASL GSSAPI (RFC 4752) with the service principal
// spn of the server at addr (what names the service in messages: "HBase",
// "ZooKeeper"). step sends one client token and returns the server's reply token
// (none after the last one, last true). Steps: the AP-REQ (mutual authentication
// asked), the server's AP-REP (checked: the server knows the service key), an empty
// token, the server's security-layer offer (a GSS wrap token), and the client's
// choice, "auth" only.
func (a *krbAuth) gssapi(spn, what, addr string, step func(tok []byte, last bool) ([]byte, error)) error {
	tkt, key, err := a.cl.GetServiceTicket(spn)
	if err != nil {
		var ke krberror.Krberror
		if errors.As(err, &ke) && ke.RootCause == krberror.NetworkingError {
			return &connError{err: fmt.Errorf("kerberos: the KDC cannot be reached for a ticket to %s: %w", spn, err)}
		}
		hint := "server_principal"
		if what == "ZooKeeper" {
			hint = "zk_server_principal"
		}
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "no ticket for %s's principal %s as %s from %s (is %s right? has the ticket expired?): %v", what, spn, a.principal, a.source, hint, err)
	}
	auth, err := types.NewAuthenticator(a.cl.Credentials.Domain(), a.cl.Credentials.CName())
	if err != nil {
		return fmt.Errorf("kerberos authenticator: %w", err)
	}
	// The GSS-API checksum (RFC 4121 4.1.1): 16-byte channel binding (none), flags.
	ck := make([]byte, 24)
	binary.LittleEndian.PutUint32(ck[:4], 16)
	binary.LittleEndian.PutUint32(ck[20:], uint32(gssapi.ContextFlagMutual|gssapi.ContextFlagInteg|gssapi.ContextFlagConf))
	auth.Cksum = types.Checksum{CksumType: chksumtype.GSSAPI, Checksum: ck}
	apReq, err := messages.NewAPReq(tkt, key, auth)
	if err != nil {
		return fmt.Errorf("kerberos AP-REQ: %w", err)
	}
	types.SetFlag(&apReq.APOptions, flags.APOptionMutualRequired)
	reqBytes, err := apReq.Marshal()
	if err != nil {
		return fmt.Errorf("kerberos AP-REQ: %w", err)
	}
	tok := append(append(append([]byte{}, krb5OIDHeader...), 0x01, 0x00), reqBytes...)
	tok = asn1tools.AddASNAppTag(tok, 0)

	reply, err := step(tok, false)
	if err != nil {
		return err
	}
	var rep spnego.KRB5Token
	if err := rep.Unmarshal(reply); err != nil {
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s answered the Kerberos AP-REQ with something else: %v", addr, err)
	}
	if rep.IsKRBError() {
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s refused %s's ticket for %s: %v", addr, a.principal, spn, rep.KRBError.Error())
	}
	if !rep.IsAPRep() {
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s did not prove it holds %s's key (no AP-REP)", addr, spn)
	}
	plain, err := crypto.DecryptEncPart(rep.APRep.EncPart, key, keyusage.AP_REP_ENCPART)
	if err != nil {
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s did not prove it holds %s's key: %v", addr, spn, err)
	}
	var part messages.EncAPRepPart
	if err := part.Unmarshal(plain); err != nil || !part.CTime.Equal(auth.CTime.Truncate(time.Second)) || part.Cusec != auth.Cusec {
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s's AP-REP does not answer this AP-REQ", addr)
	}
	ctxKey, acceptorSubkey := key, false
	if len(part.Subkey.KeyValue) > 0 {
		ctxKey, acceptorSubkey = part.Subkey, true
	}

	// The security layer: an empty token, then the server's offer.
	if reply, err = step(nil, false); err != nil {
		return err
	}
	var offer gssapi.WrapToken
	if err := offer.Unmarshal(reply, true); err != nil {
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s's security layer offer: %v", addr, err)
	}
	if ok, err := offer.Verify(ctxKey, keyusage.GSSAPI_ACCEPTOR_SEAL); !ok {
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s's security layer offer is not signed with the session key: %v", addr, err)
	}
	if len(offer.Payload) != 4 {
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s's security layer offer has %d bytes, not 4", addr, len(offer.Payload))
	}
	if offer.Payload[0]&qopAuth == 0 {
		if what != "HBase" {
			return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s %s requires SASL integrity or privacy, which dcsync does not speak", what, addr)
		}
		return driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s requires SASL integrity or privacy (hbase.rpc.protection=integrity or privacy), which dcsync does not speak: set it to authentication and use TLS (tls=true) to protect the traffic", addr)
	}
	choice := gssapi.WrapToken{
		EC:        0,
		SndSeqNum: uint64(auth.SeqNumber),
		Payload:   []byte{qopAuth, 0, 0, 0},
	}
	if acceptorSubkey {
		choice.Flags = 0x04
	}
	et, err := crypto.GetEtype(ctxKey.KeyType)
	if err != nil {
		return fmt.Errorf("kerberos: %w", err)
	}
	choice.EC = uint16(et.GetHMACBitLength() / 8)
	if err := choice.SetCheckSum(ctxKey, keyusage.GSSAPI_INITIATOR_SEAL); err != nil {
		return fmt.Errorf("kerberos: %w", err)
	}
	cb, err := choice.Marshal()
	if err != nil {
		return fmt.Errorf("kerberos: %w", err)
	}
	_, err = step(cb, true)
	return err
}

func writeSASLToken(w io.Writer, tok []byte) error {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(tok)), uint32(len(tok)))
	_, err := w.Write(append(b, tok...))
	return err
}

// readSASLReply reads one server reply of the SASL exchange: its token, or the
// server's refusal as an Unauthenticated error.
func readSASLReply(r *bufio.Reader, addr string) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// The server hangs up when it refuses the exchange without a word.
			return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s closed the connection during the Kerberos (SASL) exchange: does it want TLS (tls=true, tls_ca=), does it use Kerberos, is the server principal right?", addr)
		}
		return nil, &connError{err: fmt.Errorf("sasl with %s: %w", addr, err)}
	}
	if status := int32(binary.BigEndian.Uint32(hdr[:])); status != saslStatusSuccess {
		return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s refused the Kerberos authentication: %s", addr, saslRefusal(r))
	}
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, &connError{err: fmt.Errorf("sasl with %s: %w", addr, err)}
	}
	n := int32(binary.BigEndian.Uint32(hdr[:]))
	if n == saslSwitchSimple {
		return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s does not use Kerberos (it asks for simple authentication): drop the Kerberos parameters, or point at the secure cluster", addr)
	}
	if n < 0 || n > maxSASLToken {
		return nil, &connError{err: fmt.Errorf("sasl with %s: bad token length %d", addr, n)}
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(r, tok); err != nil {
		return nil, &connError{err: fmt.Errorf("sasl with %s: %w", addr, err)}
	}
	return tok, nil
}

// readWritableString reads a Hadoop WritableUtils string: a vint length, then UTF-8.
func readWritableString(r *bufio.Reader) (string, error) {
	n, err := readVInt(r)
	if err != nil || n < 0 || n > 1<<16 {
		return "", fmt.Errorf("bad string length")
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}

// readVInt reads a Hadoop WritableUtils vint (zero-compressed, big-endian).
func readVInt(r *bufio.Reader) (int64, error) {
	first, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	fb := int8(first)
	if fb >= -112 {
		return int64(fb), nil
	}
	// The first byte gives the sign and the total size (WritableUtils.decodeVIntSize).
	neg := fb < -120
	size := int(-111 - int(fb))
	if neg {
		size = int(-119 - int(fb))
	}
	var v int64
	for i := 1; i < size; i++ {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		v = v<<8 | int64(b)
	}
	if neg {
		v = ^v
	}
	return v, nil
}

// saslRefusal reads the Java exception that follows a SASL ERROR status and says it
// (HBase sends none for some failures: its log has the reason).
func saslRefusal(r *bufio.Reader) string {
	class, _ := readWritableString(r)
	msg, _ := readWritableString(r)
	switch {
	case class == "" && msg == "":
		return "no reason given (the server's log has it: a token it could not verify, clocks apart?)"
	case msg == "":
		return class
	}
	return class + ": " + msg
}
