// Package secure reads the credentials and TLS material that a store URL names, for
// the stores' URL openers (store/aerospike, store/hbase and its wire client) and the
// CLI, so that every store takes secrets the same way (docs/secure-clusters.md):
//
//   - A secret never travels in a URL, a flag or a process list: it comes from a file
//     the URL names (?password_file=/path, ?keytab=/path, ?tls_key=/path) or from an
//     environment variable (DCSYNC_<STORE>_PASSWORD, or DCSYNC_<STORE>_PASSWORD_FILE
//     naming a file). Exactly one source may give a secret; two are refused as
//     ambiguous.
//   - A secret file that other users may read or write (any of the mode's "other" bits
//     set) is refused, as ssh refuses such a private key: the error names the file, its
//     mode and the fix (chmod 600, or 640 with a group). Certificates and CA bundles
//     are not secret and are not checked.
//   - Errors name the parameter, the variable or the file, never the secret.
//
// It is internal: its conventions are those of dcsync's store URLs, not a library.
package secure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"runtime"
	"strings"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// MaxSecretFile bounds the size of a secret file (a password, a key or a keytab).
const MaxSecretFile = 1 << 20

// ReadFile reads the secret file at path, named what in errors ("password_file"). It
// refuses (InvalidArgument) a path that is not a regular file, a file that others may
// read or write (on systems with Unix permissions) and a file larger than
// MaxSecretFile. Symbolic links are followed: the mode checked is the target's.
func ReadFile(op, what, path string) ([]byte, error) {
	if path == "" {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%s is empty: name a file", what)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%s %q: %w", what, path, unwrapPath(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%s %q: %w", what, path, unwrapPath(err))
	}
	if !st.Mode().IsRegular() {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%s %q is not a regular file", what, path)
	}
	if err := checkMode(what, path, st.Mode()); err != nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%s", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretFile+1))
	if err != nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%s %q: read: %w", what, path, unwrapPath(err))
	}
	if len(b) > MaxSecretFile {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%s %q is larger than %d bytes", what, path, MaxSecretFile)
	}
	return b, nil
}

// unwrapPath drops the *fs.PathError around err: the caller names the file itself.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// checkMode refuses a secret file that others may read or write.
func checkMode(what, path string, m fs.FileMode) error {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		return nil // no Unix permission bits to judge by
	}
	if m.Perm()&0o007 != 0 {
		return fmt.Errorf("%s %q has mode %04o: other users may read or write it; "+
			"make it readable by its owner only (chmod 600 %s; 640 to share it with a group; "+
			"in Kubernetes, defaultMode: 0400 on the secret volume)", what, path, m.Perm(), path)
	}
	return nil
}

// Password reads a password from a file: its content without the trailing line end
// ("\n" or "\r\n"). An empty password is refused.
func Password(op, what, path string) (string, error) {
	b, err := ReadFile(op, what, path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", driver.Errorf(dcsync.InvalidArgument, op, "%s %q is empty", what, path)
	}
	return s, nil
}

// Source is one place a secret may come from.
type Source struct {
	// Param is the URL parameter naming a file (such as "password_file"), and File its
	// value; File "" means the URL does not name one.
	Param, File string
	// Env is the variable holding the secret itself (such as "DCSYNC_AEROSPIKE_PASSWORD");
	// Env+"_FILE" names a file holding it.
	Env string
}

// Lookup returns the password that exactly one of the URL parameter src.Param, the
// variable src.Env and the variable src.Env+"_FILE" gives, and which one gave it
// (named for messages: "password_file", "$DCSYNC_AEROSPIKE_PASSWORD"). ok is false
// when none does. More than one is InvalidArgument naming them (not their values).
func Lookup(op string, src Source) (secret, from string, ok bool, err error) {
	var found []string
	if src.File != "" {
		found = append(found, src.Param)
	}
	env, envSet := os.LookupEnv(src.Env)
	envSet = envSet && env != ""
	if envSet {
		found = append(found, "$"+src.Env)
	}
	envFile := os.Getenv(src.Env + "_FILE")
	if envFile != "" {
		found = append(found, "$"+src.Env+"_FILE")
	}
	switch len(found) {
	case 0:
		return "", "", false, nil
	case 1:
	default:
		return "", "", false, driver.Errorf(dcsync.InvalidArgument, op, "the password is given %d ways (%s): give exactly one", len(found), strings.Join(found, ", "))
	}
	switch {
	case src.File != "":
		secret, err = Password(op, src.Param, src.File)
	case envSet:
		secret = strings.TrimSuffix(strings.TrimSuffix(env, "\n"), "\r")
	default:
		secret, err = Password(op, "$"+src.Env+"_FILE", envFile)
	}
	if err != nil {
		return "", "", false, err
	}
	return secret, found[0], true, nil
}

// TLS is the TLS part of a store URL: ?tls=true, ?tls_ca=, ?tls_cert=, ?tls_key=,
// ?tls_name=. Any of them turns TLS on.
type TLS struct {
	// On is true when the URL asked for TLS (tls=true, or any other tls_ parameter).
	On bool
	// CA is a PEM file of the certificate authorities to trust; "" trusts the system's.
	CA string
	// Cert and Key are PEM files of the client's certificate (chain) and private key,
	// for servers that ask for one (mutual TLS, Aerospike PKI); both or neither.
	Cert, Key string
	// Name is the name the server's certificate must carry (Aerospike's TLS name); ""
	// leaves it to the store (the host name).
	Name string
}

// Params lists the URL parameters ParseTLS reads.
var Params = []string{"tls", "tls_ca", "tls_cert", "tls_key", "tls_name"}

// ParseTLS reads the tls parameters of a URL query (get returns a parameter's value).
func ParseTLS(op string, get func(string) string) (TLS, error) {
	t := TLS{CA: get("tls_ca"), Cert: get("tls_cert"), Key: get("tls_key"), Name: get("tls_name")}
	switch v := get("tls"); v {
	case "":
		t.On = t.CA != "" || t.Cert != "" || t.Key != "" || t.Name != ""
	case "true":
		t.On = true
	case "false":
		if t.CA != "" || t.Cert != "" || t.Key != "" || t.Name != "" {
			return TLS{}, driver.Errorf(dcsync.InvalidArgument, op, "tls=false with tls_ parameters: drop one or the other")
		}
	default:
		return TLS{}, driver.Errorf(dcsync.InvalidArgument, op, "tls %q is not true or false", v)
	}
	if (t.Cert == "") != (t.Key == "") {
		return TLS{}, driver.Errorf(dcsync.InvalidArgument, op, "tls_cert and tls_key go together: name both files or neither")
	}
	return t, nil
}

// Config returns the tls.Config of t (nil when TLS is off): TLS 1.2 or later, the CA
// file's authorities (else the system's), the client certificate if any. The caller
// sets ServerName (or the store's client does). A file that cannot be read or parsed
// is InvalidArgument naming it; the key file is read as a secret (ReadFile).
func (t TLS) Config(op string) (*tls.Config, error) {
	if !t.On {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.Name}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "tls_ca %q: %w", t.CA, unwrapPath(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "tls_ca %q holds no PEM certificate", t.CA)
		}
		cfg.RootCAs = pool
	}
	if t.Cert != "" {
		certPEM, err := os.ReadFile(t.Cert)
		if err != nil {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "tls_cert %q: %w", t.Cert, unwrapPath(err))
		}
		keyPEM, err := ReadFile(op, "tls_key", t.Key)
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// X509KeyPair's messages describe the PEM blocks, never their content.
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "tls_cert %q with tls_key %q: %w", t.Cert, t.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// HandshakeFailure says what failed when err (from a TLS dial, however wrapped) is a
// failed TLS handshake, and the code it deserves: Unauthenticated when one end refused
// the other's certificate, Connection when the other end does not speak TLS. ok is
// false for any other error.
func HandshakeFailure(err error, name string) (code dcsync.Code, msg string, ok bool) {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		alert    tls.AlertError
		verify   *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknown):
		return dcsync.Unauthenticated, "the server's certificate is not signed by a trusted authority (tls_ca, else the system's roots)", true
	case errors.As(err, &hostname):
		return dcsync.Unauthenticated, fmt.Sprintf("the server's certificate is not valid for the TLS name %q (tls_name; default: the host)", name), true
	case errors.As(err, &invalid):
		return dcsync.Unauthenticated, "the server's certificate is not valid: " + invalid.Error(), true
	case errors.As(err, &verify):
		return dcsync.Unauthenticated, "the server's certificate was refused: " + verify.Error(), true
	case errors.As(err, &alert):
		return dcsync.Unauthenticated, "the server refused the TLS handshake (" + alert.Error() + "): does it want a client certificate (tls_cert, tls_key) it trusts?", true
	case errors.As(err, &header):
		return dcsync.Connection, "the server does not speak TLS on this port (is TLS on there?)", true
	}
	if s := err.Error(); strings.Contains(s, "remote error: tls:") {
		// A TLS alert the server sent, as text when a wrapper dropped the type.
		return dcsync.Unauthenticated, "the server refused the TLS handshake: does it want a client certificate (tls_cert, tls_key) it trusts?", true
	}
	return 0, "", false
}

// IsSecretName reports whether a URL parameter's name says that its value is a secret
// itself (password, passwd, pwd, secret, token, credential), rather than the name of a
// file holding one (password_file, tls_key, keytab): such a parameter is refused, and
// its value masked in messages.
func IsSecretName(name string) bool {
	n := strings.ToLower(name)
	if strings.HasSuffix(n, "_file") || n == "tls_key" || n == "keytab" {
		return false
	}
	for _, w := range []string{"password", "passwd", "pwd", "secret", "token", "credential"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// RedactQuery returns the raw query q with the value of every parameter IsSecretName
// names replaced by "xxxxx". It works on queries that do not parse.
func RedactQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, _, hasValue := strings.Cut(p, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if hasValue && IsSecretName(k) {
			parts[i] = p[:strings.IndexByte(p, '=')] + "=xxxxx"
		}
	}
	return strings.Join(parts, "&")
}
