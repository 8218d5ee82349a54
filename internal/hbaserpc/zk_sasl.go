package hbaserpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// A minimal ZooKeeper client for a quorum that requires SASL (Kerberos) of every
// session (zookeeper.sessionRequireClientSASLAuth=true, or enforce.auth.schemes=sasl):
// go-zookeeper/zk has no SASL. It does only what locating HBase needs: open a
// session, authenticate it with SASL GSSAPI, read one znode, close the session.
//
// The wire protocol, from ZooKeeper's jute definitions (zookeeper.jute) and its
// client (ClientCnxn, ZooKeeperSaslClient) and server (ZooKeeperServer.processPacket
// and processSasl): every message is a 4-byte big-endian length and a jute record
// (int: 4 bytes, long: 8, boolean: 1, buffer and ustring: a 4-byte length, -1 for
// null, then the bytes). A session opens with ConnectRequest {int protocolVersion,
// long lastZxidSeen, int timeOut, long sessionId, buffer passwd, boolean readOnly}
// answered by ConnectResponse {int protocolVersion, int timeOut, long sessionId,
// buffer passwd[, boolean readOnly]}. Then each request is RequestHeader {int xid,
// int type} and a body, each reply ReplyHeader {int xid, long zxid, int err} and a
// body when err is 0. SASL is type 102 with GetSASLRequest {buffer token}, answered
// by SetSASLResponse {buffer token}; getData is type 4 with GetDataRequest {ustring
// path, boolean watch}, answered by GetDataResponse {buffer data, Stat stat};
// closeSession is type -11 with no body.

// ZooKeeper's operation codes and error codes (ZooDefs.OpCode, KeeperException.Code).
const (
	zksOpGetData      = 4
	zksOpSASL         = 102
	zksOpCloseSession = -11

	zksErrNoNode              = -101
	zksErrNoAuth              = -102
	zksErrAuthFailed          = -115
	zksErrSessionRequiresSASL = -124 // SESSIONCLOSEDREQUIRESASLAUTH
	zkNotificationXid         = -1
	zkPingXid                 = -2
	zkSessionTimeoutMs        = 10000
	zkMaxFrame                = 4 << 20
	defaultZKServicePrincipal = "zookeeper/_HOST"
)

// zkSASLGet reads the znode at path over a ZooKeeper session authenticated with
// SASL GSSAPI as c's Kerberos principal, trying the quorum's servers in turn,
// bounded by ctx and the dial timeout. A refusal is Unauthenticated naming
// ZooKeeper; a server that cannot be reached is a connError (retried).
func (c *Client) zkSASLGet(parent context.Context, path string) ([]byte, error) {
	servers := c.cfg.zkServers()
	start := 0
	if len(servers) > 1 {
		start = mrand.IntN(len(servers))
	}
	var last error
	for i := range servers {
		addr := servers[(start+i)%len(servers)]
		ctx, cancel := context.WithTimeout(parent, max(c.cfg.DialTimeout, 2*time.Second)+5*time.Second)
		data, err := c.zkSASLGetFrom(ctx, addr, path)
		cancel()
		if err == nil {
			return data, nil
		}
		var ce *connError
		if !errors.As(err, &ce) {
			return nil, err // an answer: no node, refused credentials
		}
		last = err
		if perr := parent.Err(); perr != nil {
			return nil, perr
		}
	}
	if last == nil {
		last = &connError{err: fmt.Errorf("zookeeper %q: no servers", c.cfg.ZKQuorum)}
	}
	return nil, last
}

// zkSASLGetFrom is zkSASLGet against the one server at addr.
func (c *Client) zkSASLGetFrom(ctx context.Context, addr, path string) ([]byte, error) {
	dctx, dcancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	nc, err := c.cfg.Dial(dctx, "tcp", addr)
	dcancel()
	if err != nil {
		return nil, &connError{err: fmt.Errorf("zookeeper %s: %w", addr, err)}
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	// Closing the connection when ctx ends unblocks a read or write in flight.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	s := &zkSession{nc: nc, r: bufio.NewReader(nc), addr: addr}
	if err := s.connect(); err != nil {
		return nil, err
	}
	spn, err := c.zkServicePrincipal(ctx, addr)
	if err != nil {
		return nil, err
	}
	first := true
	step := func(tok []byte, last bool) ([]byte, error) {
		reply, err := s.sasl(tok)
		if err == nil && first && len(reply) == 0 {
			return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "ZooKeeper %s does not do SASL (it answered the Kerberos token with none): drop zk_sasl, or give the server a SASL login", addr)
		}
		first = false
		return reply, err
	}
	if err := c.cfg.krb.gssapi(spn, "ZooKeeper", addr, step); err != nil {
		return nil, err
	}
	data, err := s.getData(path)
	s.closeSession()
	return data, err
}

// zkServicePrincipal is ZooKeeper's principal for the server at addr: the
// configured pattern (default zookeeper/_HOST), _HOST replaced by the server's host
// name in lower case, an IP address first resolved to its name as ZooKeeper's Java
// client does (zookeeper.sasl.client.canonicalize.hostname).
func (c *Client) zkServicePrincipal(ctx context.Context, addr string) (string, error) {
	pattern := defaultZKServicePrincipal
	if k := c.cfg.Kerberos; k != nil && k.ZKServicePrincipal != "" {
		pattern = k.ZKServicePrincipal
	}
	pattern, _, _ = strings.Cut(pattern, "@")
	if !strings.Contains(pattern, "/") {
		return "", driver.Errorf(dcsync.InvalidArgument, kerberosOp, "ZooKeeper principal %q is not service/host (zk_server_principal)", pattern)
	}
	if !strings.Contains(pattern, "_HOST") {
		return pattern, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := host
	if net.ParseIP(host) == nil {
		if addrs, err := net.DefaultResolver.LookupHost(ctx, host); err == nil && len(addrs) > 0 {
			ip = addrs[0]
		}
	}
	if net.ParseIP(ip) != nil {
		if names, err := net.DefaultResolver.LookupAddr(ctx, ip); err == nil && len(names) > 0 {
			host = strings.TrimSuffix(names[0], ".")
		}
	}
	return strings.ReplaceAll(pattern, "_HOST", strings.ToLower(host)), nil
}

// zkSession is one ZooKeeper session on one connection, used by one goroutine.
type zkSession struct {
	nc   net.Conn
	r    *bufio.Reader
	addr string
	xid  int32
}

// connect opens the session (ConnectRequest, ConnectResponse).
func (s *zkSession) connect() error {
	var b []byte
	b = binary.BigEndian.AppendUint32(b, 0)                  // protocolVersion
	b = binary.BigEndian.AppendUint64(b, 0)                  // lastZxidSeen
	b = binary.BigEndian.AppendUint32(b, zkSessionTimeoutMs) // timeOut
	b = binary.BigEndian.AppendUint64(b, 0)                  // sessionId: a new session
	b = appendJuteBuffer(b, make([]byte, 16))                // passwd
	b = append(b, 0)                                         // readOnly: false
	if err := s.write(b); err != nil {
		return err
	}
	resp, err := s.read()
	if err != nil {
		return err
	}
	d := juteReader{b: resp}
	d.int32() // protocolVersion
	timeout := d.int32()
	d.int64() // sessionId
	if d.err != nil {
		return &connError{err: fmt.Errorf("zookeeper %s: bad connect response", s.addr)}
	}
	if timeout <= 0 {
		return &connError{err: fmt.Errorf("zookeeper %s refused the session", s.addr)}
	}
	return nil
}

// sasl sends one SASL token and returns the server's (nil when it sends none).
func (s *zkSession) sasl(tok []byte) ([]byte, error) {
	body, err := s.call(zksOpSASL, appendJuteBuffer(nil, tok))
	if err != nil {
		var ze zkError
		if errors.As(err, &ze) {
			return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "ZooKeeper %s refused the Kerberos (SASL) authentication (code %d)", s.addr, int32(ze))
		}
		return nil, err
	}
	d := juteReader{b: body}
	t := d.buffer()
	if d.err != nil {
		return nil, &connError{err: fmt.Errorf("zookeeper %s: bad SASL response", s.addr)}
	}
	return t, nil
}

// getData reads the znode at path.
func (s *zkSession) getData(path string) ([]byte, error) {
	req := appendJuteBuffer(nil, []byte(path))
	req = append(req, 0) // watch: false
	body, err := s.call(zksOpGetData, req)
	var ze zkError
	switch {
	case errors.As(err, &ze) && ze == zksErrNoNode:
		return nil, &locateError{msg: "znode " + path + " does not exist (is HBase running?)", retry: true}
	case errors.As(err, &ze) && (ze == zksErrNoAuth || ze == zksErrAuthFailed || ze == zksErrSessionRequiresSASL):
		return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "ZooKeeper %s refused to read %s after the Kerberos authentication (code %d: the znode's ACL?)", s.addr, path, int32(ze))
	case errors.As(err, &ze):
		return nil, &connError{err: fmt.Errorf("zookeeper %s get %s: %w", s.addr, path, err)}
	case err != nil:
		return nil, err
	}
	d := juteReader{b: body}
	data := d.buffer()
	if d.err != nil {
		return nil, &connError{err: fmt.Errorf("zookeeper %s: bad getData response", s.addr)}
	}
	return data, nil
}

// closeSession ends the session politely (the server would expire it anyway).
func (s *zkSession) closeSession() {
	_, _ = s.call(zksOpCloseSession, nil)
}

// zkError is a non-zero error code of a ZooKeeper reply.
type zkError int32

func (e zkError) Error() string { return fmt.Sprintf("zookeeper error code %d", int32(e)) }

// call sends one request and returns the body of its reply, skipping watch
// notifications and pings; a non-zero error code is a zkError.
func (s *zkSession) call(op int32, body []byte) ([]byte, error) {
	s.xid++
	b := binary.BigEndian.AppendUint32(nil, uint32(s.xid))
	b = binary.BigEndian.AppendUint32(b, uint32(op))
	if err := s.write(append(b, body...)); err != nil {
		return nil, err
	}
	for {
		resp, err := s.read()
		if err != nil {
			if op == zksOpSASL && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
				return nil, driver.Errorf(dcsync.Unauthenticated, kerberosOp, "ZooKeeper %s closed the connection during the Kerberos (SASL) exchange: is zk_server_principal right? does the server use Kerberos?", s.addr)
			}
			return nil, err
		}
		d := juteReader{b: resp}
		xid := d.int32()
		d.int64() // zxid
		code := d.int32()
		if d.err != nil {
			return nil, &connError{err: fmt.Errorf("zookeeper %s: short reply", s.addr)}
		}
		if xid == zkNotificationXid || xid == zkPingXid {
			continue
		}
		if xid != s.xid {
			return nil, &connError{err: fmt.Errorf("zookeeper %s: reply %d to request %d", s.addr, xid, s.xid)}
		}
		if code != 0 {
			return nil, zkError(code)
		}
		return d.b, nil
	}
}

func (s *zkSession) write(b []byte) error {
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	if _, err := s.nc.Write(append(frame, b...)); err != nil {
		return &connError{err: fmt.Errorf("zookeeper %s: %w", s.addr, err)}
	}
	return nil
}

func (s *zkSession) read() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		return nil, &connError{err: fmt.Errorf("zookeeper %s: %w", s.addr, err)}
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > zkMaxFrame {
		return nil, &connError{err: fmt.Errorf("zookeeper %s: frame of %d bytes", s.addr, n)}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, &connError{err: fmt.Errorf("zookeeper %s: %w", s.addr, err)}
	}
	return b, nil
}

// appendJuteBuffer appends a jute buffer (or ustring): a 4-byte length, the bytes.
func appendJuteBuffer(b, v []byte) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(v))), v...)
}

// juteReader decodes jute fields in order; the first short read sets err.
type juteReader struct {
	b   []byte
	err error
}

func (d *juteReader) take(n int) []byte {
	if d.err != nil || n > len(d.b) {
		d.err = io.ErrUnexpectedEOF
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *juteReader) int32() int32 {
	if v := d.take(4); v != nil {
		return int32(binary.BigEndian.Uint32(v))
	}
	return 0
}

func (d *juteReader) int64() int64 {
	if v := d.take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// buffer reads a jute buffer; length -1 is null (nil).
func (d *juteReader) buffer() []byte {
	n := d.int32()
	if d.err != nil || n < 0 {
		return nil
	}
	if n > zkMaxFrame {
		d.err = errors.New("buffer too long")
		return nil
	}
	return d.take(int(n))
}
