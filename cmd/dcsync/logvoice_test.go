package main

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
)

// The library's log records reach stderr in the CLI's voice: "dcsync: ", the level
// unless info, the message and key=value attributes, one line; debug only with
// --verbose.
func TestLibraryLogsInTheCLIVoice(t *testing.T) {
	var buf bytes.Buffer
	a := &app{stderr: &buf}
	log := a.cliLogger().With("store", "sqlite").WithGroup("lock")
	log.Warn("renewal failed\nretrying", "key", "DC/dc1/app/job", "err", errors.New("connection: refused"))
	log.Info("partition handed over", "partition", 3)
	log.Debug("not shown")
	want := "dcsync: warn: renewal failed; retrying: store=sqlite lock.key=DC/dc1/app/job lock.err=\"connection: refused\"\n" +
		"dcsync: partition handed over: store=sqlite lock.partition=3\n"
	if buf.String() != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	a.verbose = true
	a.cliLogger().Debug("shown", slog.Int("n", 1))
	if got := buf.String(); got != "dcsync: debug: shown: n=1\n" {
		t.Fatalf("--verbose debug record printed %q", got)
	}
}
