package tlstest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/aerospike/aerospike-client-go/v8/pkg/bcrypt"
)

// Aerospike makes a Proxy in front of an Aerospike Community server look like an
// Enterprise server with TLS to the client, in the two places where a client with TLS
// or credentials needs Enterprise:
//
//   - Peer discovery: a client with TLS asks "peers-tls-std", which Community answers
//     "ERROR:25:enterprise only"; the proxy asks "peers-clear-std" instead and renames
//     the answer (a one-node cluster: an empty peer list either way).
//   - Security, when Users or PKIUser is set: the proxy answers the admin protocol's
//     login and authenticate commands itself (Community answers SECURITY_NOT_SUPPORTED),
//     checking the user and credential the client sends, hands out a session token,
//     and refuses data commands on a connection that has not authenticated
//     (NOT_AUTHENTICATED), as an Enterprise server with security on does.
//
// This is an emulation of the login protocol as the Go client speaks it
// (admin_command.go, login_command.go), not Enterprise's implementation: the result
// codes it refuses with (INVALID_USER, INVALID_CREDENTIAL) are the ones the protocol
// defines for these cases, not ones seen from a real Enterprise server.
type Aerospike struct {
	// Users maps user names to passwords (internal authentication: the client sends
	// the bcrypt hash; external: also the password as it is).
	Users map[string]string
	// PKIUser is the common name a client certificate must carry to log in with
	// AuthModePKI ("" refuses PKI logins).
	PKIUser string

	deny            atomic.Int32 // a result code every data command is refused with; 0: none
	logins, refused atomic.Int64
	tokens          sync.Map // issued session tokens (string) to user
	hashes          sync.Map // user to the bcrypt credential of its password
}

// credential returns the bcrypt credential the client sends for user's password,
// computed once per user (bcrypt is slow on purpose, and slower under -race).
func (a *Aerospike) credential(user, password string) (string, error) {
	if h, ok := a.hashes.Load(user); ok {
		return h.(string), nil
	}
	h, err := bcrypt.Hash(password, bcryptSalt)
	if err != nil {
		return "", err
	}
	a.hashes.Store(user, h)
	return h, nil
}

// Deny makes the proxy refuse every data command from now on with result code rc (as
// a server does with ROLE_VIOLATION when a user's role is revoked); 0 stops it.
func (a *Aerospike) Deny(rc int) { a.deny.Store(int32(rc)) }

// Logins returns the number of logins the proxy accepted and refused.
func (a *Aerospike) Logins() (ok, refused int64) { return a.logins.Load(), a.refused.Load() }

func (a *Aerospike) secure() bool { return len(a.Users) > 0 || a.PKIUser != "" }

// Aerospike protocol constants (the Go client's names).
const (
	asInfo    = 1
	asAdmin   = 2
	asMessage = 3

	adminAuthenticate = 0
	adminLogin        = 20

	fieldUser          = 0
	fieldCredential    = 3
	fieldClearPassword = 4
	fieldSessionToken  = 5
	fieldSessionTTL    = 6

	rcInvalidUser       = 60
	rcInvalidCredential = 65
	rcNotAuthenticated  = 80
)

// bcryptSalt is the Go client's fixed salt for the credential it sends.
const bcryptSalt = "$2a$10$7EqJtq98hPqEX7fNZaFWoO"

// NewAerospikeProxy starts a Proxy (as NewProxy) that also plays the Enterprise parts a
// is configured for.
func NewAerospikeProxy(t testingTB, target string, cfg *tls.Config, a *Aerospike) *Proxy {
	t.Helper()
	p := newProxy(t, target)
	for user, password := range a.Users {
		if _, err := a.credential(user, password); err != nil {
			t.Fatal(err)
		}
	}
	p.as = a
	p.start(cfg)
	return p
}

// asConn is one proxied connection in Aerospike mode.
type asConn struct {
	a      *Aerospike
	client *tls.Conn
	wmu    sync.Mutex // serialises writes to client
	authed bool       // read by the request loop only
}

func (c *asConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.client.Write(b)
	return err
}

// readFrame reads one protocol frame: its 8-byte header and body.
func readFrame(r *bufio.Reader) (typ byte, frame []byte, err error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint64(h[:]) & (1<<48 - 1)
	if n > 128<<20 {
		return 0, nil, errors.New("frame too large")
	}
	frame = make([]byte, 8+n)
	copy(frame, h[:])
	if _, err := io.ReadFull(r, frame[8:]); err != nil {
		return 0, nil, err
	}
	return h[1], frame, nil
}

// frame returns a frame of type typ with body.
func frameOf(typ byte, body []byte) []byte {
	f := make([]byte, 8+len(body))
	binary.BigEndian.PutUint64(f, uint64(len(body))|2<<56|uint64(typ)<<48)
	copy(f[8:], body)
	return f
}

// renameInfo replaces old with new in an info frame's body.
func renameInfo(frame []byte, old, new string) []byte {
	body := frame[8:]
	if !bytes.Contains(body, []byte(old)) {
		return frame
	}
	return frameOf(asInfo, bytes.ReplaceAll(body, []byte(old), []byte(new)))
}

// requests forwards the client's frames to the server, answering admin commands
// itself when the emulation has security.
func (c *asConn) requests(s net.Conn) error {
	r := bufio.NewReader(c.client)
	for {
		typ, frame, err := readFrame(r)
		if err != nil {
			return err
		}
		switch {
		case typ == asAdmin && c.a.secure():
			if err := c.admin(frame[8:]); err != nil {
				return err
			}
			continue
		case typ == asInfo:
			if c.a.secure() && !c.authed {
				// An Enterprise server answers info on an unauthenticated connection
				// with this error for every name.
				if err := c.write(frameOf(asInfo, []byte("ERROR:80:not authenticated\n"))); err != nil {
					return err
				}
				continue
			}
			frame = renameInfo(frame, "peers-tls-std", "peers-clear-std")
			frame = renameInfo(frame, "peers-tls-alt", "peers-clear-alt")
		case c.a.secure() && !c.authed:
			// A data command before authentication.
			if err := c.write(refusal(rcNotAuthenticated)); err != nil {
				return err
			}
			continue
		case c.a.deny.Load() != 0:
			if err := c.write(refusal(byte(c.a.deny.Load()))); err != nil {
				return err
			}
			continue
		}
		if _, err := s.Write(frame); err != nil {
			return err
		}
	}
}

// replies forwards the server's frames to the client, renaming the peers answer back.
func (c *asConn) replies(s net.Conn) error {
	r := bufio.NewReader(s)
	for {
		typ, frame, err := readFrame(r)
		if err != nil {
			return err
		}
		if typ == asInfo {
			frame = renameInfo(frame, "peers-clear-std\t", "peers-tls-std\t")
			frame = renameInfo(frame, "peers-clear-alt\t", "peers-tls-alt\t")
		}
		if err := c.write(frame); err != nil {
			return err
		}
	}
}

// admin answers one admin command (body: the 16-byte admin header and its fields).
func (c *asConn) admin(body []byte) error {
	if len(body) < 16 {
		return errors.New("short admin command")
	}
	cmd, n := body[2], int(body[3])
	fields := map[byte][]byte{}
	off := 16
	for i := 0; i < n; i++ {
		if off+5 > len(body) {
			return errors.New("short admin field")
		}
		l := int(binary.BigEndian.Uint32(body[off:])) - 1
		id := body[off+4]
		off += 5
		if l < 0 || off+l > len(body) {
			return errors.New("bad admin field")
		}
		fields[id] = body[off : off+l]
		off += l
	}
	user := string(fields[fieldUser])
	switch cmd {
	case adminLogin:
		code := c.login(user, fields)
		if code != 0 {
			c.a.refused.Add(1)
			return c.write(adminReply(code))
		}
		c.a.logins.Add(1)
		var tok [16]byte
		_, _ = rand.Read(tok[:])
		c.a.tokens.Store(string(tok[:]), user)
		c.authed = true
		var ttl [4]byte
		binary.BigEndian.PutUint32(ttl[:], 86400)
		return c.write(adminReply(0, field(fieldSessionToken, tok[:]), field(fieldSessionTTL, ttl[:])))
	case adminAuthenticate:
		if _, ok := c.a.tokens.Load(string(fields[fieldSessionToken])); !ok {
			return c.write(adminReply(rcNotAuthenticated))
		}
		c.authed = true
		return c.write(adminReply(0))
	}
	return c.write(adminReply(rcNotAuthenticated))
}

// login checks a login's fields and returns its result code.
func (c *asConn) login(user string, fields map[byte][]byte) byte {
	if len(fields) == 0 { // PKI: the certificate is the identity
		for _, cert := range c.client.ConnectionState().VerifiedChains {
			if c.a.PKIUser != "" && cert[0].Subject.CommonName == c.a.PKIUser {
				return 0
			}
		}
		return rcInvalidCredential
	}
	password, ok := c.a.Users[user]
	if !ok {
		return rcInvalidUser
	}
	want, err := c.a.credential(user, password)
	if err != nil || string(fields[fieldCredential]) != want {
		return rcInvalidCredential
	}
	if clear, ok := fields[fieldClearPassword]; ok && string(clear) != password {
		return rcInvalidCredential
	}
	return 0
}

func field(id byte, v []byte) []byte {
	f := make([]byte, 5+len(v))
	binary.BigEndian.PutUint32(f, uint32(len(v)+1))
	f[4] = id
	copy(f[5:], v)
	return f
}

// adminReply is an admin reply with result code and fields.
func adminReply(code byte, fields ...[]byte) []byte {
	body := make([]byte, 16)
	body[1] = code // offset 9 of the frame
	body[3] = byte(len(fields))
	for _, f := range fields {
		body = append(body, f...)
	}
	return frameOf(asAdmin, body)
}

// refusal is a data command's reply with result code rc and nothing else.
func refusal(rc byte) []byte {
	reply := make([]byte, 22)
	reply[0], reply[5] = 22, rc
	return frameOf(asMessage, reply)
}
