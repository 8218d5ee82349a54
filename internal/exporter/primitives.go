package exporter

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/primlist"
)

// primDescs are the gauges of elections, semaphores and read-write locks.
type primDescs struct {
	leaderToken, leaderPublished            *prometheus.Desc
	semPermits, semHeld                     *prometheus.Desc
	rwWriter, rwWaiting, rwReaders, rwSlots *prometheus.Desc
}

func newPrimDescs(labels []string) primDescs {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }
	return primDescs{
		leaderToken:     d("dcsync_election_leader_token", "Fencing token of an election's leader (the holder of its lock)."),
		leaderPublished: d("dcsync_election_leader_published", "1 when the election's leader has published its value, 0 while pending."),
		semPermits:      d("dcsync_semaphore_permits", "N, the number of permits of a semaphore with permits held."),
		semHeld:         d("dcsync_semaphore_permits_held", "Permit slots of a semaphore held (live leases)."),
		rwWriter:        d("dcsync_rwlock_writer_held", "1 when a read-write lock's writer lock is held (by a writer holding or waiting for readers)."),
		rwWaiting:       d("dcsync_rwlock_writer_waiting", "1 when a read-write lock's writer holds its writer lock and waits for readers to leave."),
		rwReaders:       d("dcsync_rwlock_readers_held", "Reader slots of a read-write lock held."),
		rwSlots:         d("dcsync_rwlock_reader_slots", "M, the number of reader slots of a read-write lock."),
	}
}

func (d primDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.leaderToken, d.leaderPublished, d.semPermits, d.semHeld, d.rwWriter, d.rwWaiting, d.rwReaders, d.rwSlots} {
		ch <- x
	}
}

// collectPrimitives sends the gauges of the elections, semaphores and read-write locks
// among the listed locks (of every client, Key.Client set): no store call but one
// batched register read, and none when there are none of them.
func (c *Collector) collectPrimitives(ctx context.Context, ch chan<- prometheus.Metric, locks []driver.LockInfo, failed func(string, error)) {
	l := primlist.Split(locks)
	regsRead := true
	if err := primlist.Read(ctx, c.cfg.Store, &l); err != nil {
		failed("registers", err)
		regsRead = false
	}
	d := c.prim
	gauge := func(desc *prometheus.Desc, v float64, k dcsync.Key) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, k.Client, k.Name, k.Level.String(), k.Farm)
	}
	b := func(ok bool) float64 {
		if ok {
			return 1
		}
		return 0
	}
	for _, e := range l.Elections {
		gauge(d.leaderToken, float64(e.Leader.Token), e.Key)
		if e.Err != nil {
			failed("registers", e.Err)
		} else if regsRead {
			gauge(d.leaderPublished, b(e.Published), e.Key)
		}
	}
	for _, s := range l.Semaphores {
		gauge(d.semHeld, float64(len(s.Held)), s.Key)
		if s.Err != nil {
			failed("registers", s.Err)
		} else if regsRead {
			gauge(d.semPermits, float64(s.Permits), s.Key)
		}
	}
	for _, r := range l.RWLocks {
		gauge(d.rwWriter, b(r.Writer != nil), r.Key)
		gauge(d.rwWaiting, b(r.WriterWaiting()), r.Key)
		gauge(d.rwReaders, float64(len(r.Readers)), r.Key)
		if r.Err != nil {
			failed("registers", r.Err)
		} else if regsRead {
			gauge(d.rwSlots, float64(r.Slots), r.Key)
		}
	}
}
