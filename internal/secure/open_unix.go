//go:build unix

package secure

import (
	"os"
	"syscall"
)

// openNoWait opens path for reading without waiting: O_NONBLOCK makes the open of a
// named pipe with no writer return at once (a regular file reads as usual).
func openNoWait(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
