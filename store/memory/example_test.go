package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// ExampleNew shares one in-process store between two lock managers, as two components
// of one process would: they exclude each other. Nothing outside the process sees it.
func ExampleNew() {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()

	a, _ := lock.New(store, "billing", "dc1")
	b, _ := lock.New(store, "billing", "dc1")
	l, err := a.TryAcquire(ctx, "report", lock.TTL(time.Minute))
	if err != nil {
		panic(err)
	}
	_, err = b.TryAcquire(ctx, "report")
	fmt.Println("b refused:", errors.Is(err, dcsync.ErrLockUnavailable))
	fmt.Println("release:", l.Release(ctx))
	// Output:
	// b refused: true
	// release: <nil>
}
