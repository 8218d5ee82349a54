package storeurl

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dcsync/dcsync"
)

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, raw := range []string{"memory:", "sqlite://" + filepath.Join(dir, "a.db"), "sqlite:" + filepath.Join(dir, "b.db")} {
		s, err := Open(ctx, raw)
		if err != nil {
			t.Fatalf("Open(%q): %v", raw, err)
		}
		s.Close()
	}
	for _, raw := range []string{"", "redis://x", "sqlite://", "%zz"} {
		if _, err := Open(ctx, raw); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("Open(%q) = %v, want InvalidArgument", raw, err)
		}
	}
}
