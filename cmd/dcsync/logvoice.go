package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// One voice on stderr: the library's log records (a lease renewal that failed, a queue
// partition handed over) are printed the way the CLI prints its errors,
//
//	dcsync: warning: lock renewal failed; retrying: key=DC/dc1/app/job err="..."
//
// one line each: "dcsync: ", the level in lower case unless it is info, the message and
// the record's attributes as key=value (values quoted when they hold spaces). Info and
// above are printed; --verbose adds debug.

// cliLogger returns the logger the CLI hands the library.
func (a *app) cliLogger() *slog.Logger {
	lvl := slog.LevelInfo
	if a.verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(&cliHandler{w: a.stderr, level: lvl, mu: &sync.Mutex{}})
}

// cliHandler is the slog.Handler of cliLogger.
type cliHandler struct {
	w      io.Writer
	level  slog.Level
	mu     *sync.Mutex
	prefix string // group names, "g1.g2."
	attrs  []slog.Attr
}

func (h *cliHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *cliHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("dcsync: ")
	if r.Level != slog.LevelInfo {
		b.WriteString(strings.ToLower(r.Level.String()))
		b.WriteString(": ")
	}
	b.WriteString(oneLine(r.Message))
	sep := ": "
	write := func(prefix string, a slog.Attr) {
		a.Value = a.Value.Resolve()
		if a.Equal(slog.Attr{}) {
			return
		}
		b.WriteString(sep)
		sep = " "
		b.WriteString(prefix + a.Key)
		b.WriteByte('=')
		b.WriteString(quoteIfNeeded(oneLine(a.Value.String())))
	}
	for _, a := range h.attrs {
		write("", a) // keys already carry their groups
	}
	r.Attrs(func(a slog.Attr) bool {
		write(h.prefix, a)
		return true
	})
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *cliHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		a.Key = h.prefix + a.Key
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *cliHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

// oneLine joins the lines of s with "; ".
func oneLine(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	return errorLine(fmt.Errorf("%s", s))
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"=") {
		return strconv.Quote(s)
	}
	return s
}
