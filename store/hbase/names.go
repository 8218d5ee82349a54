package hbase

import (
	"net"
	"strconv"
	"strings"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// The names a store is opened with are checked before it dials: a ZooKeeper server
// "host[:port]" with a port in 1..65535, and table names HBase accepts. HBase's rules
// (org.apache.hadoop.hbase.TableName: isLegalNamespaceName, isLegalTableQualifierName):
// an optional namespace of letters, digits and '_', then ':'; a qualifier of letters,
// digits, '_', '-' and '.', not starting with '.' or '-'. Without the check an illegal
// name fails at the first operation, after the master's IOException, as Internal.

// checkNames checks the quorum and the configured table names; it names the parameter
// (param gives each one's name for the caller: an Options field or a URL parameter).
func checkNames(op string, quorum []string, cfg Config, param func(string) string) error {
	for _, h := range quorum {
		if err := checkZKServer(h); err != nil {
			return driver.Errorf(dcsync.InvalidArgument, op, "%s %q: %v", param("quorum"), h, err)
		}
	}
	for _, t := range []struct{ name, value string }{{"lock_table", cfg.LockTable}, {"queue_table", cfg.QueueTable}} {
		if t.value == "" {
			continue
		}
		if err := checkTableName(t.value); err != nil {
			return driver.Errorf(dcsync.InvalidArgument, op, "%s %q: %v", param(t.name), t.value, err)
		}
	}
	if sfx := cfg.LatchTableSuffix; sfx != "" {
		if i := strings.IndexFunc(sfx, func(r rune) bool { return !qualifierRune(r) }); i >= 0 {
			return driver.Errorf(dcsync.InvalidArgument, op, "%s %q: character %q is not allowed in an HBase table name (letters, digits, '_', '-', '.')", param("latch_table_suffix"), sfx, sfx[i])
		}
	}
	return nil
}

// checkZKServer checks one ZooKeeper server, "host" or "host:port".
func checkZKServer(h string) error {
	if !strings.Contains(h, ":") {
		return nil // port 2181
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		return err
	}
	if host == "" {
		return errorString("no host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return errorString("port " + strconv.Quote(port) + " is not in 1..65535")
	}
	return nil
}

// checkTableName checks "qualifier" or "namespace:qualifier" by HBase's rules.
func checkTableName(name string) error {
	ns, q, found := strings.Cut(name, ":")
	if !found {
		ns, q = "", name
	} else {
		if ns == "" {
			return errorString("empty namespace before ':'")
		}
		for _, r := range ns {
			if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return errorString("character " + strconv.QuoteRune(r) + " is not allowed in an HBase namespace (letters, digits, '_')")
			}
		}
	}
	switch {
	case q == "":
		return errorString("empty table name")
	case q[0] == '.' || q[0] == '-':
		return errorString("an HBase table name cannot start with '.' or '-'")
	}
	for _, r := range q {
		if !qualifierRune(r) {
			return errorString("character " + strconv.QuoteRune(r) + " is not allowed in an HBase table name (letters, digits, '_', '-', '.')")
		}
	}
	return nil
}

func qualifierRune(r rune) bool {
	return r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
}

type errorString string

func (e errorString) Error() string { return string(e) }
