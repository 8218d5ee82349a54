package secure

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dcsync/dcsync"
)

func write(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// A secret file others may read or write is refused, through a symbolic link too;
// one its owner and group may read is taken.
func TestReadFileModes(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	const secret = "hunter2-x"
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o400: true, 0o640: true, 0o644: false, 0o604: false, 0o602: false, 0o666: false} {
		p := write(t, "pw", secret+"\n", mode)
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(p, link); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{p, link} {
			got, err := Password("op", "password_file", path)
			switch {
			case ok && (err != nil || got != secret):
				t.Errorf("mode %04o (%s): %q, %v; want the password", mode, path, got, err)
			case !ok && (dcsync.CodeOf(err) != dcsync.InvalidArgument || !strings.Contains(err.Error(), fmt.Sprintf("%04o", mode))):
				t.Errorf("mode %04o (%s): %v; want InvalidArgument naming the mode", mode, path, err)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the secret: %v", err)
			}
		}
	}
	if _, err := ReadFile("op", "keytab", t.TempDir()); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Errorf("a directory: %v", err)
	}
}

// Exactly one source: the URL's file, the variable, the variable's file.
func TestLookup(t *testing.T) {
	const env = "DCSYNC_SECURETEST_PASSWORD"
	file := write(t, "pw", "from-file\r\n", 0o600)
	t.Setenv(env, "")
	t.Setenv(env+"_FILE", "")
	if _, _, ok, err := Lookup("op", Source{Param: "password_file", Env: env}); ok || err != nil {
		t.Fatalf("nothing given: ok %v, %v", ok, err)
	}
	got, from, ok, err := Lookup("op", Source{Param: "password_file", File: file, Env: env})
	if !ok || err != nil || got != "from-file" || from != "password_file" {
		t.Fatalf("the URL's file: %q from %q, %v, %v", got, from, ok, err)
	}
	t.Setenv(env, "from-env")
	if got, from, _, _ := Lookup("op", Source{Param: "password_file", Env: env}); got != "from-env" || from != "$"+env {
		t.Fatalf("the variable: %q from %q", got, from)
	}
	if _, _, _, err := Lookup("op", Source{Param: "password_file", File: file, Env: env}); dcsync.CodeOf(err) != dcsync.InvalidArgument || strings.Contains(err.Error(), "from-env") {
		t.Fatalf("two sources: %v", err)
	}
	t.Setenv(env, "")
	t.Setenv(env+"_FILE", file)
	if got, from, _, _ := Lookup("op", Source{Param: "password_file", Env: env}); got != "from-file" || from != "$"+env+"_FILE" {
		t.Fatalf("the variable's file: %q from %q", got, from)
	}
}

func TestHandshakeFailure(t *testing.T) {
	if code, _, ok := HandshakeFailure(fmt.Errorf("wrapped: %w", tls.RecordHeaderError{Msg: "x"}), "n"); !ok || code != dcsync.Connection {
		t.Errorf("record header error: %v %v", code, ok)
	}
	if code, _, ok := HandshakeFailure(fmt.Errorf("wrapped: %w", tls.AlertError(42)), "n"); !ok || code != dcsync.Unauthenticated {
		t.Errorf("alert: %v %v", code, ok)
	}
	if _, _, ok := HandshakeFailure(errors.New("connection refused"), "n"); ok {
		t.Error("a refused connection is not a handshake failure")
	}
}

func TestParseTLS(t *testing.T) {
	get := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if tl, err := ParseTLS("op", get(nil)); err != nil || tl.On {
		t.Fatalf("no parameters: %+v %v", tl, err)
	}
	if tl, err := ParseTLS("op", get(map[string]string{"tls_name": "x"})); err != nil || !tl.On {
		t.Fatalf("tls_name alone turns TLS on: %+v %v", tl, err)
	}
	for _, m := range []map[string]string{{"tls": "yes"}, {"tls": "false", "tls_ca": "/x"}, {"tls_key": "/k"}} {
		if _, err := ParseTLS("op", get(m)); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("%v: %v", m, err)
		}
	}
	cfg, err := TLS{On: true}.Config("op")
	if err != nil || cfg.MinVersion != tls.VersionTLS12 || cfg.RootCAs != nil || cfg.InsecureSkipVerify {
		t.Fatalf("system roots: %+v %v", cfg, err)
	}
}
