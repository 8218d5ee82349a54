package memory_test

import (
	"testing"

	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/memory"
)

func BenchmarkMemory(b *testing.B) {
	s := memory.New()
	defer s.Close()
	drivertest.Bench(b, s)
}
