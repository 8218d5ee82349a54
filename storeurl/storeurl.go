// Package storeurl opens a dcsync store named by a URL, for the CLI and for
// applications that take their store from configuration:
//
//	sqlite:///var/lib/app/dcsync.db   one SQLite file (also sqlite:relative/path.db)
//	memory:                           in this process only
//	aerospike://[USER@]HOST:PORT/NAMESPACE  Aerospike (query: latch_set_suffix,
//	                                  lock_set_suffix, attempts, timeout, retry_delay,
//	                                  op_ids_kept, durable_delete; security: tls, tls_ca,
//	                                  tls_name, tls_cert, tls_key, user, password_file, auth)
//	hbase://ZK_HOST:PORT[,ZK_HOST:PORT]  HBase via its ZooKeeper quorum (query: lock_table,
//	                                  latch_table_suffix, zk_root, open_timeout)
//
// A parameter a store does not know is refused with InvalidArgument naming it, and so
// is a fragment ("#..."): nothing in a store URL is silently ignored.
//
// # Credentials and TLS
//
// A store URL carries no secret (docs/secure-clusters.md): a password in it
// ("user:password@") is refused with InvalidArgument saying where it goes instead, and
// the URL is shown with the password masked ("xxxxx") in that and every other error.
// Secrets come from files the URL names or from environment variables:
//
//	aerospike://alice@HOST:PORT/NS?tls_ca=/etc/ca.pem&tls_name=cluster1
//	    password from $DCSYNC_AEROSPIKE_PASSWORD, a file named by
//	    $DCSYNC_AEROSPIKE_PASSWORD_FILE, or ?password_file=/path (exactly one);
//	    auth=internal|external|pki, tls_cert=&tls_key= for a client certificate
//
// A secret file that other users may read is refused. A server that refuses the
// credentials, or a certificate dcsync refuses, is dcsync.Unauthenticated. User
// information is taken only by aerospike URLs (the user name alone); hbase URLs
// refuse it (HBase's identity is a Kerberos principal, see docs/secure-clusters.md).
//
// # SQLite paths
//
// The path of a sqlite URL is everything after "sqlite:" or "sqlite://", percent-decoded:
// a '#', '?' or '%' that is part of a file name must be written %23, %3F or %25
// (SQLiteURL does that). Its one parameter is busy_timeout, how long a call waits for
// another process's write lock (a Go duration, default 10s), as in
// sqlite:///var/lib/dcsync/dcsync.db?busy_timeout=30s.
//
// # Which SQLite file: per user or per host
//
// The default store, DefaultURL, is a file in the user's state directory
// ($XDG_STATE_HOME/dcsync/dcsync.db, else ~/.local/state/dcsync/dcsync.db). It is PER
// USER: a root cron job and an operator on the same host use two different files, and
// their locks do not exclude each other. Processes that must exclude each other have to
// name one file. For a store shared by every user of a host use SystemSQLitePath,
// sqlite:///var/lib/dcsync/dcsync.db, prepared once by root:
//
//	groupadd dcsync                    # members may use the shared store
//	install -d -m 2770 -g dcsync /var/lib/dcsync
//	install -m 660 -g dcsync /dev/null /var/lib/dcsync/dcsync.db
//
// SQLite gives the file's -wal and -shm companions the mode of the database file, so
// every member of the group can write them too. A user who may read the file but not
// write it gets a read-only store: counts and lock states, no updates.
package storeurl

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/secure"
	"github.com/dcsync/dcsync/store/aerospike"
	"github.com/dcsync/dcsync/store/hbase"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
)

// SystemSQLitePath is the suggested path of a SQLite store shared by every user of a
// host (see the package doc for how to prepare it).
const SystemSQLitePath = "/var/lib/dcsync/dcsync.db"

// DefaultSQLitePath returns the per-user default SQLite file:
// $XDG_STATE_HOME/dcsync/dcsync.db when XDG_STATE_HOME is an absolute path, else
// ~/.local/state/dcsync/dcsync.db. It does not create anything.
func DefaultSQLitePath() (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(dir) { // the XDG spec says to ignore a relative path
		home, err := os.UserHomeDir()
		if err != nil {
			return "", driver.Errorf(dcsync.InvalidArgument, "storeurl.DefaultSQLitePath", "no XDG_STATE_HOME and no home directory: %w", err)
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "dcsync", "dcsync.db"), nil
}

// DefaultURL returns the URL of the per-user default store, SQLiteURL of
// DefaultSQLitePath. See the package doc: it is not shared between users.
func DefaultURL() (string, error) {
	p, err := DefaultSQLitePath()
	if err != nil {
		return "", err
	}
	return SQLiteURL(p), nil
}

// SQLiteURL returns the sqlite URL of the file at path, escaping what a URL would
// otherwise read as a query, a fragment or an escape ('?', '#', '%', and spaces).
func SQLiteURL(path string) string {
	p := (&url.URL{Path: filepath.ToSlash(path)}).EscapedPath()
	if strings.HasPrefix(p, "/") {
		return "sqlite://" + p
	}
	return "sqlite:" + p
}

func invalid(raw, format string, args ...any) error {
	return driver.Errorf(dcsync.InvalidArgument, "storeurl.Open", "store URL %q: "+format, append([]any{Redact(raw)}, args...)...)
}

// Redact returns raw with the password of its user information, if any, replaced by
// "xxxxx", as url.URL.Redacted does, and so the value of every query parameter whose
// name says it is a secret ("password=", "token=", ...), also for a URL that does not
// parse. The user information is found however it is spelt: after "scheme://",
// "scheme:/" or "scheme:", with a password holding an unencoded '/', '?', '#' or '@',
// or with its ':' percent-encoded (%3A); a user name that does not decode is masked
// whole. A sqlite URL, whose path may hold ':', '@' and '?', is returned as it is.
func Redact(raw string) string {
	scheme, _, _ := strings.Cut(raw, ":")
	if strings.EqualFold(scheme, "sqlite") {
		return raw
	}
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		q, frag, hasFrag := strings.Cut(raw[i+1:], "#")
		raw = raw[:i+1] + secure.RedactQuery(q)
		if hasFrag {
			raw += "#" + frag
		}
	}
	start, end, ok := userinfo(raw)
	if !ok {
		return raw
	}
	info := raw[start:end]
	user, shown := maskedUser(info)
	if !shown {
		return raw
	}
	return raw[:start] + user + raw[end:]
}

// knownScheme reports whether scheme (lower case) is one whose URL may carry user
// information: aerospike, hbase or memory (which takes none, but may be given one).
func knownScheme(scheme string) bool {
	switch scheme {
	case "aerospike", "hbase", "memory":
		return true
	}
	return false
}

// userinfo finds the user information of a store URL that is not a sqlite URL:
// raw[start:end], followed by the '@' at raw[end]. It looks after "scheme:" and any
// slashes (the whole string when the scheme is none dcsync knows, which may be a user
// name typed without one). The user information ends at the last '@' before the first
// '?' or '#': a host, a port, a namespace and a path hold no '@', so a password holding
// '/' ends there too. When no '@' comes before the first '?' or '#' but one comes after
// it, the text up to that '@' is user information (a password holding '?' or '#') when
// what lies between the '?' and the '@' is no "name=value" parameter, or when what
// precedes the '?' is no HOST[:PORT] (a ':' followed by something other than a port).
// A query value holding '@' (principal=dcsync/host@REALM) is thus left alone.
func userinfo(raw string) (start, end int, ok bool) {
	if colon := strings.IndexByte(raw, ':'); colon >= 0 && knownScheme(strings.ToLower(raw[:colon])) {
		start = colon + 1
		for start < len(raw) && raw[start] == '/' {
			start++
		}
	}
	s := raw[start:]
	q := strings.IndexAny(s, "?#")
	if q < 0 {
		q = len(s)
	}
	if at := strings.LastIndexByte(s[:q], '@'); at >= 0 {
		return start, start + at, true
	}
	if q == len(s) {
		return 0, 0, false
	}
	at := strings.IndexByte(s[q+1:], '@')
	if at < 0 {
		return 0, 0, false
	}
	at += q + 1
	if between := s[q+1 : at]; !strings.ContainsAny(between, "=&") || !isHostPort(s[:q]) {
		return start, start + at, true
	}
	return 0, 0, false
}

// isHostPort reports whether the text before a URL's query (authority and path) starts
// with a plausible HOST[:PORT][,HOST[:PORT]...]: no ':' in the authority, a bracketed
// IPv6 address, or a ':' followed by digits up to the authority's end or a ','.
func isHostPort(s string) bool {
	if strings.HasPrefix(s, "[") {
		return true
	}
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	c := strings.IndexByte(s, ':')
	if c < 0 {
		return true
	}
	port := s[c+1:]
	if i := strings.IndexByte(port, ','); i >= 0 {
		port = port[:i]
	}
	if port == "" {
		return true
	}
	for _, r := range port {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// maskedUser returns the user information info as messages show it, and whether it
// holds a password (or may: masked is then different from info): "user:xxxxx" for
// "user:password" and for "user%3Apassword", "xxxxx" for a user name that does not
// decode, info itself for a user name alone.
func maskedUser(info string) (masked string, hasPassword bool) {
	decoded, err := url.PathUnescape(info)
	if err != nil {
		return "xxxxx", true
	}
	if !strings.Contains(decoded, ":") {
		return info, false
	}
	cut := strings.IndexByte(info, ':')
	if i := strings.Index(strings.ToLower(info), "%3a"); i >= 0 && (cut < 0 || i < cut) {
		cut = i
	}
	return info[:cut] + ":xxxxx", true
}

// Open opens the store that raw names. Bad URLs, unknown parameters and fragments are
// InvalidArgument, refused before any I/O. A password in the URL, however spelt (see
// Redact), is refused before the URL is parsed, and no error shows it.
func Open(ctx context.Context, raw string) (driver.Store, error) {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok || scheme == "" {
		return nil, invalid(raw, "no scheme (want sqlite:, memory:, hbase:// or aerospike://)")
	}
	switch strings.ToLower(scheme) {
	case "sqlite":
		return openSQLite(ctx, raw, rest)
	case "memory":
		if rest != "" {
			return nil, invalid(raw, "memory: takes no path or parameters")
		}
		return memory.New(), nil
	case "aerospike", "hbase":
	default:
		return nil, invalid(raw, "unknown scheme %q (want sqlite, memory, hbase or aerospike)", strings.ToLower(scheme))
	}
	if shown := Redact(raw); shown != raw {
		// Refused before parsing, so that no parse error can show the secret.
		return nil, invalid(raw, "a secret in the URL would show in process lists and logs: %s", passwordHint(scheme))
	}
	if _, _, hasUser := userinfo(raw); hasUser && !strings.EqualFold(scheme, "aerospike") {
		return nil, invalid(raw, "user information is not supported: %s", passwordHint(scheme))
	}
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			// The parser's message quotes a piece of the URL, which may be a piece of
			// user information it could not tell from the host.
			return nil, invalid(raw, "does not parse as a URL (a '@', ':', '/', '?', '#' or '%%' in a user name must be percent-encoded)")
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the *url.Error repeats the URL
		}
		return nil, driver.Errorf(dcsync.InvalidArgument, "storeurl.Open", "store URL %q: %w", raw, err)
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return nil, invalid(raw, "unexpected fragment %q", "#"+u.Fragment)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if _, hasPassword := u.User.Password(); hasPassword || strings.Contains(u.User.Username(), ":") || (u.User != nil && u.Scheme != "aerospike") {
		// Only aerospike takes a user name in the URL; dropping user information
		// silently would connect without the authentication the user asked for.
		return nil, invalid(Redact(raw), "user information is not supported: %s", passwordHint(u.Scheme))
	}
	switch u.Scheme {
	case "aerospike":
		return aerospike.OpenURL(ctx, u)
	case "hbase":
		return hbase.OpenURL(ctx, u)
	}
	return nil, invalid(raw, "unknown scheme %q (want sqlite, memory, hbase or aerospike)", u.Scheme)
}

// passwordHint says, for a store URL of scheme, how to pass credentials instead.
func passwordHint(scheme string) string {
	switch strings.ToLower(scheme) {
	case "aerospike":
		return "give the user alone (aerospike://USER@HOST/NS or ?user=USER) and the password in $DCSYNC_AEROSPIKE_PASSWORD, " +
			"in a file named by $DCSYNC_AEROSPIKE_PASSWORD_FILE, or in a file named by ?password_file=/path"
	case "hbase":
		return "HBase authenticates with Kerberos: see docs/secure-clusters.md (?principal=, ?keytab=/path or $KRB5CCNAME)"
	}
	return "this store takes no credentials"
}

// openSQLite opens "sqlite:" + rest.
func openSQLite(ctx context.Context, raw, rest string) (driver.Store, error) {
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return nil, invalid(raw, "unexpected fragment %q: a '#' in a file name must be written %%23", rest[i:])
	}
	rest = strings.TrimPrefix(rest, "//")
	rawPath, rawQuery, _ := strings.Cut(rest, "?")
	path, err := url.PathUnescape(rawPath)
	if err != nil {
		return nil, invalid(raw, "bad escape in the path (a '%%' in a file name must be written %%25): %v", err)
	}
	if path == "" {
		return nil, invalid(raw, "names no file")
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, invalid(raw, "bad query: %v", err)
	}
	var opts []sqlite.Option
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		vs := q[name]
		switch name {
		case "busy_timeout":
			d, err := time.ParseDuration(vs[len(vs)-1])
			if err != nil || d < 0 || len(vs) > 1 {
				return nil, invalid(raw, "busy_timeout %q is not one duration >= 0 (such as 30s)", strings.Join(vs, ","))
			}
			opts = append(opts, sqlite.WithBusyTimeout(d))
		default:
			return nil, invalid(raw, "unknown parameter %q (sqlite takes busy_timeout; a '?' in a file name must be written %%3F)", name)
		}
	}
	return sqlite.Open(ctx, path, opts...)
}
