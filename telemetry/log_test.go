package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/telemetry"
)

// logBuf collects JSON log records.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuf) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func hasKeys(t *testing.T, r map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := r[k]; !ok {
			t.Errorf("log record %v has no %q", r, k)
		}
	}
	if r[telemetry.LogStore] != "memory" {
		t.Errorf("log record %v: store %v, want memory", r, r[telemetry.LogStore])
	}
}

// TestLogKeys checks that lock and latch log under the keys of the package doc.
func TestLogKeys(t *testing.T) {
	ctx := context.Background()
	var logs logBuf
	logger := slog.New(slog.NewJSONHandler(&logs, nil))

	now := time.Now()
	var mu sync.Mutex
	st := memory.New(memory.WithClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now }))
	lm, err := lock.New(st, "client", "farm", lock.WithLogger(logger), lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lm.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if err := l.Refresh(ctx); dcsync.CodeOf(err) != dcsync.LockLost {
		t.Fatalf("Refresh after the lease: %v", err)
	}
	recs := logs.records(t)
	if len(recs) != 1 {
		t.Fatalf("%d log records after a lease loss, want 1: %v", len(recs), recs)
	}
	hasKeys(t, recs[0], telemetry.LogStore, telemetry.LogOperation, telemetry.LogKey, telemetry.LogOwner, telemetry.LogToken, telemetry.LogErr)

	// A watcher whose reads fail with Connection, then work.
	fs := &failingStore{Store: memory.New()}
	fs.fail.Store(true)
	cm, err := latch.New(fs, "client", "farm", latch.WithLogger(logger), latch.WithPollInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cm.CreateCountDown(ctx, "l", 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait(ctx) }()
	for len(logs.records(t)) < 2 {
		time.Sleep(time.Millisecond)
	}
	fs.fail.Store(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The watcher logs its recovery after it has ended the waits.
	for len(logs.records(t)) < 3 {
		time.Sleep(time.Millisecond)
	}
	recs = logs.records(t)
	if len(recs) != 3 {
		t.Fatalf("%d log records, want 3: %v", len(recs), recs)
	}
	hasKeys(t, recs[1], telemetry.LogStore, telemetry.LogOperation, telemetry.LogLatches, telemetry.LogInterval, telemetry.LogErr)
	hasKeys(t, recs[2], telemetry.LogStore, telemetry.LogOperation, telemetry.LogLatches)
}

// failingStore fails ReadLatches with Connection while fail is set. It names itself
// "memory" for the test's checks.
type failingStore struct {
	*memory.Store
	fail atomic.Bool
}

func (s *failingStore) StoreName() string { return "memory" }

func (s *failingStore) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	if s.fail.Load() {
		return nil, driver.Errorf(dcsync.Connection, "test", "store unreachable")
	}
	return s.Store.ReadLatches(ctx, keys)
}
