package aerospike_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/aerospike"
)

// A namespace the cluster does not have is InvalidArgument when the store is opened,
// naming the namespace, not an INVALID_NAMESPACE Internal error at the first operation.
func TestOpenURLRefusesUnknownNamespace(t *testing.T) {
	addr, ns := realServer(t), namespace
	s, err := aerospike.OpenURL(context.Background(), storeURL(addr, "no_such_ns"))
	if s != nil {
		s.Close()
	}
	if dcsync.CodeOf(err) != dcsync.InvalidArgument || !strings.Contains(err.Error(), `"no_such_ns"`) || !strings.Contains(err.Error(), ns) {
		t.Fatalf("OpenURL of an unknown namespace = %v; want InvalidArgument naming it and the cluster's (%s)", err, ns)
	}
	s, err = aerospike.OpenURL(context.Background(), storeURL(addr, ns))
	if err != nil {
		t.Fatalf("OpenURL of namespace %s: %v", ns, err)
	}
	s.Close()
}
