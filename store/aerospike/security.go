package aerospike

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"slices"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/secure"
)

// PasswordEnv is the environment variable OpenURL takes the password from when the URL
// names a user and no password_file; PasswordEnv+"_FILE" names a file holding it.
// Exactly one of the three may be given (docs/secure-clusters.md).
const PasswordEnv = "DCSYNC_AEROSPIKE_PASSWORD"

// securityParams are the URL parameters of security (besides secure.Params).
var securityParams = append([]string{"user", "password_file", "auth"}, secure.Params...)

// passwordHint says where a password goes instead of the URL.
const passwordHint = "give the user alone (aerospike://USER@HOST/NS or ?user=USER) and the password in $" +
	PasswordEnv + ", in a file named by $" + PasswordEnv + "_FILE, or in a file named by ?password_file=/path"

// security is what a URL asks of the connection: TLS and who the client is.
type security struct {
	tls      *tls.Config // nil: plain TCP
	tlsName  string      // the name the server's certificate must carry ("" : the host's)
	auth     string      // "", "internal", "external" or "pki"
	user     string
	password string // never printed
	from     string // where the password came from, for messages
}

// refusePassword refuses a URL with a password in its user information, or with a
// parameter whose name says it holds a secret (password=, token=), showing the URL
// with the secret masked.
func refusePassword(op string, u *url.URL) error {
	if _, has := u.User.Password(); has {
		return driver.Errorf(dcsync.InvalidArgument, op, "URL %s: a password in the URL would show in process lists and logs: %s", shownURL(u), passwordHint)
	}
	for name := range u.Query() {
		if secure.IsSecretName(name) {
			return driver.Errorf(dcsync.InvalidArgument, op, "URL %s: parameter %q would put a secret in the URL, where process lists and logs show it: %s", shownURL(u), name, passwordHint)
		}
	}
	return nil
}

// shownURL is u as messages show it: without a password or the value of a parameter
// named for a secret.
func shownURL(u *url.URL) string {
	c := *u
	c.RawQuery = secure.RedactQuery(u.RawQuery)
	return c.Redacted()
}

// parseSecurity reads the security parameters of u (already checked for a password in
// it) and the password's file or variable. It does no network I/O.
func parseSecurity(op string, u *url.URL) (security, error) {
	q := u.Query()
	var sec security
	t, err := secure.ParseTLS(op, q.Get)
	if err != nil {
		return security{}, err
	}
	if sec.tls, err = t.Config(op); err != nil {
		return security{}, err
	}
	sec.tlsName = t.Name
	sec.user = q.Get("user")
	if u.User != nil && u.User.Username() != "" {
		if sec.user != "" {
			return security{}, driver.Errorf(dcsync.InvalidArgument, op, "URL %s names the user twice (USER@ and ?user=): give it once", shownURL(u))
		}
		sec.user = u.User.Username()
	}
	sec.auth = q.Get("auth")
	if !slices.Contains([]string{"", "internal", "external", "pki"}, sec.auth) {
		return security{}, driver.Errorf(dcsync.InvalidArgument, op, "auth %q is not internal, external or pki", sec.auth)
	}
	password, from, hasPassword, err := secure.Lookup(op, secure.Source{Param: "password_file", File: q.Get("password_file"), Env: PasswordEnv})
	if err != nil {
		return security{}, err
	}
	switch {
	case sec.auth == "pki":
		if sec.user != "" || hasPassword {
			return security{}, driver.Errorf(dcsync.InvalidArgument, op, "auth=pki takes no user or password (the client certificate is the identity): drop the user and %s", orNone(from))
		}
		if t.Cert == "" {
			return security{}, driver.Errorf(dcsync.InvalidArgument, op, "auth=pki needs a client certificate: tls_cert and tls_key")
		}
		return sec, nil
	case sec.user == "" && hasPassword:
		return security{}, driver.Errorf(dcsync.InvalidArgument, op, "a password (%s) but no user: name the user (aerospike://USER@HOST/NS or ?user=USER)", from)
	case sec.user == "" && sec.auth != "":
		return security{}, driver.Errorf(dcsync.InvalidArgument, op, "auth=%s needs a user (aerospike://USER@HOST/NS or ?user=USER) and a password", sec.auth)
	case sec.user != "" && !hasPassword:
		return security{}, driver.Errorf(dcsync.InvalidArgument, op, "user %q has no password: put it in $%s, in a file named by $%s_FILE, or in a file named by ?password_file=/path", sec.user, PasswordEnv, PasswordEnv)
	case sec.auth == "external" && sec.tls == nil:
		// The client refuses it too: external authentication sends the password as is.
		return security{}, driver.Errorf(dcsync.InvalidArgument, op, "auth=external sends the password as it is: it needs TLS (tls_ca=/path or tls=true)")
	}
	if sec.user != "" && sec.auth == "" {
		sec.auth = "internal"
	}
	sec.password, sec.from = password, from
	return sec, nil
}

func orNone(from string) string {
	if from == "" {
		return "nothing else"
	}
	return from
}

// apply sets the client policy's TLS and authentication.
func (sec security) apply(p *as.ClientPolicy) {
	p.TlsConfig = sec.tls
	switch sec.auth {
	case "internal":
		p.AuthMode, p.User, p.Password = as.AuthModeInternal, sec.user, sec.password
	case "external":
		p.AuthMode, p.User, p.Password = as.AuthModeExternal, sec.user, sec.password
	case "pki":
		p.AuthMode = as.AuthModePKI
	}
}

// host returns the seed host, with its TLS name when TLS is on: tls_name, else the
// host's name (as the client would take it).
func (sec *security) host(name string, port int) *as.Host {
	h := as.NewHost(name, port)
	if sec.tls != nil {
		if sec.tlsName == "" {
			sec.tlsName = name
		}
		h.TLSName = sec.tlsName
	}
	return h
}

// authCodes are the result codes of a server that refused who the client is.
var authCodes = []types.ResultCode{
	types.INVALID_USER, types.INVALID_PASSWORD, types.EXPIRED_PASSWORD, types.FORBIDDEN_PASSWORD,
	types.INVALID_CREDENTIAL, types.EXPIRED_SESSION, types.NOT_AUTHENTICATED, types.ROLE_VIOLATION,
	types.NOT_WHITELISTED, types.SECURITY_SCHEME_NOT_SUPPORTED,
}

// dialError maps the error of a client that could not connect to addr: a refused
// certificate or credential is Unauthenticated (naming what failed, never the
// password), a server that does not speak TLS and anything else Connection.
func (sec security) dialError(op, addr string, err error) error {
	if code, msg, ok := secure.HandshakeFailure(err, sec.tlsName); ok {
		return driver.Errorf(code, op, "TLS to %s: %s: %w", addr, msg, err)
	}
	var ae *as.AerospikeError
	if errors.As(err, &ae) {
		switch {
		case ae.Matches(types.SECURITY_NOT_SUPPORTED, types.SECURITY_NOT_ENABLED):
			return driver.Errorf(dcsync.Unauthenticated, op,
				"%s: the server has no security (Community Edition, or security not enabled) and refuses a login: connect without a user and password (login answered %v): %w",
				addr, firstCode(err, types.SECURITY_NOT_SUPPORTED, types.SECURITY_NOT_ENABLED), err)
		case ae.Matches(authCodes...):
			return driver.Errorf(dcsync.Unauthenticated, op, "%s: the server refused %s (%v): %w", addr, sec.who(), firstCode(err, authCodes...), err)
		}
	}
	if sec.tls != nil && (ae == nil || !ae.Matches(types.TIMEOUT)) {
		// Closed or reset during the handshake: what a server without TLS does.
		return driver.Errorf(dcsync.Connection, op, "dial %s with TLS (TLS name %q; does the server speak TLS on this port?): %w", addr, sec.tlsName, err)
	}
	return driver.Errorf(dcsync.Connection, op, "dial %s: %w", addr, err)
}

// who names the identity the client presented, for messages.
func (sec security) who() string {
	switch sec.auth {
	case "pki":
		return "the client certificate (auth=pki)"
	case "":
		return "a client without credentials"
	}
	return fmt.Sprintf("user %q (auth=%s, password from %s)", sec.user, sec.auth, sec.from)
}

// firstCode returns the first of codes that err's chain carries.
func firstCode(err error, codes ...types.ResultCode) types.ResultCode {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ae, ok := e.(*as.AerospikeError); ok && slices.Contains(codes, ae.ResultCode) {
			return ae.ResultCode
		}
	}
	return codes[0]
}
