package storeurl

import (
	"context"
	"strings"
	"testing"
)

// Review (issue 19): a password holding '/', '?' or '#' (typed unencoded) must not be
// echoed by Open's error. Redact ends the authority at the first of these, finds no
// password, and the parse error then prints the raw URL.
func TestReviewPasswordWithSlashNotEchoed(t *testing.T) {
	ctx := context.Background()
	const secret = "s3cr"
	for _, raw := range []string{
		"aerospike://admin:" + secret + "/et@127.0.0.1:1/test",
		"aerospike://admin:" + secret + "?et@127.0.0.1:1/test",
		"hbase://admin:" + secret + "/et@127.0.0.1:1",
	} {
		_, err := Open(ctx, raw)
		if err == nil {
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q): the error shows the password: %v", raw, err)
		}
	}
}
