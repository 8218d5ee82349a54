//go:build unix

package secure

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestReviewFIFORefusedNotWaitedOn (review, issue 19): ReadFile "refuses a path that
// is not a regular file", but it opens the path before it looks at what it is: a named
// pipe with no writer (a password_file= or tls_key= naming one by mistake) blocks the
// open, and with it the store's Open, for as long as nobody writes to it. The test
// waits 20 s (far past any load), then unblocks the open itself.
func TestReviewFIFORefusedNotWaitedOn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pw.fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadFile("test", "password_file", path)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("ReadFile of a named pipe succeeded")
		}
	case <-time.After(20 * time.Second):
		// Unblock the open (a writer that closes at once), so no goroutine is left.
		if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatal("ReadFile of a named pipe with no writer blocked (20 s) instead of refusing a file that is not regular")
	}
}
