package memory_test

import (
	"testing"

	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/storetest"
)

func BenchmarkMemory(b *testing.B) {
	s := memory.New()
	defer s.Close()
	storetest.Bench(b, s)
}
