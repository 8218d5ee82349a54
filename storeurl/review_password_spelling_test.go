package storeurl

import (
	"context"
	"strings"
	"testing"
)

// Review (issue 19): user:password typed after "scheme:/" or "scheme:" (one slash or
// none, a common slip), or with the colon percent-encoded (%3A), is neither refused
// as a password nor kept out of the error: Redact looks only after "://" and for a
// literal ':' (the decoded user name "admin:<password>" is then echoed as a user).
func TestReviewPasswordOtherSpellingsNotEchoed(t *testing.T) {
	ctx := context.Background()
	const secret = "s3cret-Qm4"
	for _, raw := range []string{
		"aerospike:/admin:" + secret + "@127.0.0.1:1/test",
		"aerospike:admin:" + secret + "@127.0.0.1:1/test",
		"hbase:/admin:" + secret + "@127.0.0.1:1",
		"aerospike://admin%3A" + secret + "@127.0.0.1:1/test",
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
