package storeurl

import (
	"context"
	"strings"
	"testing"
)

// Review (issue 19): a password given as a query parameter (?password=, the spelling
// many URL conventions use) is refused as an unknown parameter, but the error prints
// the whole URL with the password in it.
func TestReviewPasswordQueryParamNotEchoed(t *testing.T) {
	ctx := context.Background()
	const secret = "s3cret-Qm4"
	for _, raw := range []string{
		"aerospike://127.0.0.1:1/test?user=admin&password=" + secret,
		"hbase://127.0.0.1:1?password=" + secret,
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
