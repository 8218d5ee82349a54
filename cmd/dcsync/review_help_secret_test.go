package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestReviewHelpHidesStoreURLPassword (review, issue 19): a password someone put in
// $DCSYNC_STORE's URL is refused when the store is opened, but the help of every
// command prints the variable's value as the --store flag's default, password and
// all ("is in no output": TestSecretsStayHidden's promise, for a spelling it does
// not try).
func TestReviewHelpHidesStoreURLPassword(t *testing.T) {
	const secret = "Sekr1t-help-4e1b"
	t.Setenv("DCSYNC_STORE", "aerospike://admin:"+secret+"@127.0.0.1:1/test")
	for _, args := range [][]string{{"--help"}, {"lock", "--help"}, {"lock", "status", "x", "--client", "c"}} {
		var out, errOut bytes.Buffer
		run(args, &out, &errOut)
		if s := out.String() + errOut.String(); strings.Contains(s, secret) {
			i := strings.Index(s, secret)
			t.Errorf("dcsync %v shows the password of $DCSYNC_STORE: ...%s...", args, s[max(0, i-80):i+len(secret)])
		}
	}
}
