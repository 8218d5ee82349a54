package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync/internal/exporter"
)

// defaultExporterListen is where 'dcsync exporter' listens unless told otherwise:
// loopback only, so that nothing is exposed beyond the host by default.
const defaultExporterListen = "127.0.0.1:9464"

func newExporterCmd(a *app) *cobra.Command {
	var listen, clients string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "exporter [--listen ADDR] [--clients C1,C2]",
		Short: "Serve the store's state (queue lag, dead letters, held locks, latch counts, elections, semaphores, rwlocks) to Prometheus",
		Long: `Serve the state of the store to Prometheus on http://ADDR/metrics: every queue's lag
per consumer group and partition and its dead letters, and the held locks (time left,
token), latch counts, elections (leader token, value published), semaphores (N,
permits held) and read-write locks (writer held or waiting, readers held, M) of the
clients named by --clients (default: --client). Each scrape reads the store (queues:
one listing, then one batched read of bounds and of offsets per group; locks and
latches: one listing each per client; elections, semaphores and read-write locks: the
same lock listing plus one batched register read), within --timeout;
dcsync_exporter_up is 0 when a read failed.
Kafka users run Burrow or a lag exporter for this; alerts hang on dcsync_queue_lag,
dcsync_queue_group_lag and dcsync_queue_dead_letters. The metric list is in
docs/operations.md. It listens on loopback unless --listen names another address, and
runs until SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return withCode(exitUsage, fmt.Errorf("--timeout %v is not positive", timeout))
			}
			s, err := a.open(c.Context())
			if err != nil {
				return err
			}
			var ids []string
			for _, id := range strings.Split(clients, ",") {
				if id = strings.TrimSpace(id); id != "" {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 && a.client != "" {
				ids = []string{a.client}
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(exporter.New(exporter.Config{Store: s, Clients: ids, Timeout: timeout, Logger: a.cliLogger()}),
				collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("--listen %s: %w", listen, err))
			}
			mux := http.NewServeMux()
			mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/" {
					http.NotFound(w, r)
					return
				}
				fmt.Fprintln(w, "dcsync exporter: metrics at /metrics")
			})
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			a.cliLogger().Info("exporter serving", "url", "http://"+ln.Addr().String()+"/metrics")
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return err
			case <-c.Context().Done():
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context()), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return context.Cause(c.Context())
		},
	}
	c.Flags().StringVar(&listen, "listen", defaultExporterListen, "address to serve /metrics on (loopback by default)")
	c.Flags().StringVar(&clients, "clients", "", "client ids whose locks and latches to report, comma-separated (default: --client)")
	c.Flags().DurationVar(&timeout, "timeout", exporter.DefaultTimeout, "bound of one scrape's store reads")
	return c
}
