package aerospike_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/aerospike"
)

// DurableDelete reaches the server on every lock release: a Community server answers
// ENTERPRISE_ONLY, which is how this test sees it was sent (an Enterprise
// strong-consistency namespace needs it unless it allows expunges).
func TestDurableDeleteIsSentOnRelease(t *testing.T) {
	c := dial(t, realServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := dcsync.Key{Level: dcsync.XDC, Client: "durable", Farm: "dc1", Name: unique("durable")}
	for _, durable := range []bool{false, true} {
		s, err := aerospike.New(c, aerospike.Config{Namespace: namespace, DurableDelete: durable, Attempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLock(ctx, k, "owner", time.Minute); err != nil {
			t.Fatalf("durable=%v: acquire: %v", durable, err)
		}
		err = s.ReleaseLock(ctx, k, "owner")
		switch {
		case !durable && err != nil:
			t.Fatalf("plain release: %v", err)
		case durable && (err == nil || !strings.Contains(err.Error(), "ENTERPRISE_ONLY")):
			t.Fatalf("durable release on a Community server = %v; want ENTERPRISE_ONLY", err)
		}
	}
	u, _ := url.Parse("aerospike://127.0.0.1:1/test?durable_delete=maybe")
	if _, err := aerospike.OpenURL(ctx, u); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("durable_delete=maybe: %v; want InvalidArgument", err)
	}
}
