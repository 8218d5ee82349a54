package javaclients

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Require starts the tool for t and closes it when t ends. When Java or Maven is missing,
// or the tool cannot be built or started, it skips t, or fails it when CI=true.
func Require(t testing.TB, cfg Config) *Tool {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the Java interop tool is unavailable: "+format, args...)
		}
		t.Skipf("skipping Java interop: "+format, args...)
	}
	for _, bin := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(bin); err != nil {
			unavailable("%s not found (Java 17 and Maven build testenv/javaclients)", bin)
		}
	}
	// A cold Maven cache downloads the HBase and Aerospike clients first.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tool, err := Start(ctx, cfg)
	if err != nil {
		unavailable("%v", err)
	}
	t.Cleanup(func() {
		if err := tool.Close(); err != nil {
			t.Errorf("javaclients: %v", err)
		}
	})
	return tool
}
