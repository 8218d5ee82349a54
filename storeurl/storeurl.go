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
// parse. A sqlite URL, whose path may hold ':', '@' and '?', is returned as it is.
func Redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || strings.EqualFold(scheme, "sqlite") {
		return raw
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		q, frag, hasFrag := strings.Cut(rest[i+1:], "#")
		rest = rest[:i+1] + secure.RedactQuery(q)
		if hasFrag {
			rest += "#" + frag
		}
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
		if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	return scheme + "://" + rest
}

// Open opens the store that raw names. Bad URLs, unknown parameters and fragments are
// InvalidArgument, refused before any I/O.
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
	}
	if shown := Redact(raw); shown != raw {
		// Refused before parsing, so that no parse error can show the secret.
		return nil, invalid(raw, "a secret in the URL would show in process lists and logs: %s", passwordHint(scheme))
	}
	u, err := url.Parse(raw)
	if err != nil {
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
	if _, hasPassword := u.User.Password(); hasPassword || (u.User != nil && u.Scheme != "aerospike") {
		// Only aerospike takes a user name in the URL; dropping user information
		// silently would connect without the authentication the user asked for.
		return nil, invalid(u.Redacted(), "user information is not supported: %s", passwordHint(u.Scheme))
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
