// Package exporter is the Prometheus collector of `dcsync exporter`: the state of a
// store, read at each scrape, not one process's view. It reports the held locks of the
// given clients with their time left and tokens, their latches' counts, and (when the
// store can list queues) every queue's lag per group and partition and its dead
// letters, the numbers Kafka users get from Burrow or a lag exporter and hang alerts
// on.
//
// Metrics (gauges; each scrape reads the store once per kind, within Config.Timeout):
//
//	dcsync_lock_expires_in_seconds{client,name,level,farm}   time left of a held lock's lease
//	dcsync_lock_token{client,name,level,farm}                its holder's fencing token
//	dcsync_latch_count{client,name,farm}                     a latch's count in one farm's cell
//	dcsync_latch_expires_in_seconds{client,name,farm}        time left of that cell
//	dcsync_election_leader_token{client,name,level,farm}     token of an election's leader (its lock's holder)
//	dcsync_election_leader_published{client,name,level,farm} 1 when that leader's value is published, 0 while pending
//	dcsync_semaphore_permits{client,name,level,farm}         N, a semaphore's number of permits
//	dcsync_semaphore_permits_held{client,name,level,farm}    its permit slots held
//	dcsync_rwlock_writer_held{client,name,level,farm}        1 when a read-write lock's writer lock is held (writing or waiting)
//	dcsync_rwlock_writer_waiting{client,name,level,farm}     1 when that writer waits for readers to leave
//	dcsync_rwlock_readers_held{client,name,level,farm}       its reader slots held
//	dcsync_rwlock_reader_slots{client,name,level,farm}       M, its number of reader slots
//	dcsync_exporter_up                                       1 when every read of the last scrape succeeded
//	dcsync_exporter_scrape_duration_seconds                  how long the last scrape's reads took
//	dcsync_exporter_read_errors_total{what}                  failed reads, by what was read (counter)
//
// and the queue metrics of queueMetrics. The election, semaphore and read-write lock
// gauges come from the same lock listing (internal/primlist parses the names), plus ONE
// batched register read per scrape for all clients (values, N, M); they cover what
// holds a lock (an election with a leader, a semaphore with a permit held, a read-write
// lock held or waited for), and the locks they are made of keep their dcsync_lock_*
// series under their store names too. Lock owners are not labels: an owner id is new
// at every acquisition, and a label per owner would grow without bound.
package exporter

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcsync/dcsync/driver"
)

// DefaultTimeout bounds one scrape's store reads when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Config is what a Collector reports.
type Config struct {
	// Store is the store read at each scrape.
	Store driver.Store
	// Clients are the client ids whose locks, latches, elections, semaphores and
	// read-write locks are reported (the stores list by client). None: no metrics of
	// those.
	Clients []string
	// Timeout bounds one scrape's reads (DefaultTimeout if zero).
	Timeout time.Duration
	// Logger receives failed reads (discarded if nil).
	Logger *slog.Logger
}

// Collector is a prometheus.Collector of a store's state.
type Collector struct {
	cfg Config

	lockLeft, lockToken, latchCount, latchLeft *prometheus.Desc
	prim                                       primDescs
	up, duration                               *prometheus.Desc
	readErrors                                 *prometheus.CounterVec
	queue                                      queueDescs

	mu sync.Mutex // one scrape at a time: a slow store is not read twice at once
}

// New returns the collector of cfg.
func New(cfg Config) *Collector {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	lockLabels := []string{"client", "name", "level", "farm"}
	latchLabels := []string{"client", "name", "farm"}
	return &Collector{
		cfg:        cfg,
		lockLeft:   prometheus.NewDesc("dcsync_lock_expires_in_seconds", "Time left of a held lock's lease, by the store's clock.", lockLabels, nil),
		lockToken:  prometheus.NewDesc("dcsync_lock_token", "Fencing token of a held lock's holder.", lockLabels, nil),
		latchCount: prometheus.NewDesc("dcsync_latch_count", "Count of a latch's farm cell (an XDC latch's count is the sum over its farms).", latchLabels, nil),
		latchLeft:  prometheus.NewDesc("dcsync_latch_expires_in_seconds", "Time left of a latch's farm cell.", latchLabels, nil),
		up:         prometheus.NewDesc("dcsync_exporter_up", "1 when every store read of the scrape succeeded, else 0.", nil, nil),
		duration:   prometheus.NewDesc("dcsync_exporter_scrape_duration_seconds", "Time the scrape's store reads took.", nil, nil),
		readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dcsync_exporter_read_errors_total",
			Help: "Store reads of a scrape that failed, by what was read."}, []string{"what"}),
		queue: newQueueDescs(),
		prim:  newPrimDescs(lockLabels),
	}
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lockLeft, c.lockToken, c.latchCount, c.latchLeft, c.up, c.duration} {
		ch <- d
	}
	c.readErrors.Describe(ch)
	c.queue.describe(ch)
	c.prim.describe(ch)
}

// Collect reads the store and sends the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	start := time.Now()
	ok := true
	failed := func(what string, err error) {
		ok = false
		c.readErrors.WithLabelValues(what).Inc()
		c.cfg.Logger.Warn("exporter: store read failed", "what", what, "err", err)
	}
	secondsLeft := func(t time.Time) float64 { return time.Until(t).Seconds() }
	if ll, can := c.cfg.Store.(driver.LockLister); can {
		var all []driver.LockInfo
		for _, client := range c.cfg.Clients {
			locks, err := ll.ListLocks(ctx, client)
			if err != nil {
				failed("locks", err)
				continue
			}
			for _, l := range locks {
				l.Key.Client = client
				all = append(all, l)
				farm := l.Key.Farm
				labels := []string{client, l.Key.Name, l.Key.Level.String(), farm}
				if !l.Expires.IsZero() {
					ch <- prometheus.MustNewConstMetric(c.lockLeft, prometheus.GaugeValue, secondsLeft(l.Expires), labels...)
				}
				ch <- prometheus.MustNewConstMetric(c.lockToken, prometheus.GaugeValue, float64(l.Token), labels...)
			}
		}
		c.collectPrimitives(ctx, ch, all, failed)
	}
	if ll, can := c.cfg.Store.(driver.LatchLister); can {
		for _, client := range c.cfg.Clients {
			latches, err := ll.ListLatches(ctx, client)
			if err != nil {
				failed("latches", err)
				continue
			}
			for _, l := range latches {
				labels := []string{client, l.Key.Name, l.Key.Farm}
				ch <- prometheus.MustNewConstMetric(c.latchCount, prometheus.GaugeValue, float64(l.Count), labels...)
				if !l.Expires.IsZero() {
					ch <- prometheus.MustNewConstMetric(c.latchLeft, prometheus.GaugeValue, secondsLeft(l.Expires), labels...)
				}
			}
		}
	}
	if !c.collectQueues(ctx, ch, failed) {
		ok = false
	}
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(c.duration, prometheus.GaugeValue, time.Since(start).Seconds())
	c.readErrors.Collect(ch)
}

// itoa formats a partition number as a label value.
func itoa(n int) string { return strconv.Itoa(n) }
