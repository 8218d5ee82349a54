package storeurl_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/storeurl"
)

// ExampleOpen opens a store from a URL taken from configuration: here an in-process
// memory: store, then a SQLite file (SQLiteURL escapes the path). hbase:// and
// aerospike:// URLs open the other stores the same way (see the package doc).
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "dcsync-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	for _, raw := range []string{
		"memory:",
		storeurl.SQLiteURL(filepath.Join(dir, "locks #1.db")) + "?busy_timeout=5s",
	} {
		store, err := storeurl.Open(ctx, raw)
		if err != nil {
			panic(err)
		}
		locks, _ := lock.New(store, "billing", "dc1")
		l, err := locks.TryAcquire(ctx, "report", lock.TTL(time.Minute))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%T token %d\n", store, l.Token())
		_ = l.Release(ctx)
		_ = store.Close()
	}
	// Output:
	// *memory.Store token 1
	// *sqlite.Store token 1
}

// ExampleOpen_invalid: a URL the stores do not understand is refused before any I/O.
func ExampleOpen_invalid() {
	_, err := storeurl.Open(context.Background(), "memory:?size=10")
	fmt.Println(err != nil)
	_, err = storeurl.Open(context.Background(), "redis://localhost:6379")
	fmt.Println(err != nil)
	// Output:
	// true
	// true
}
