package exporter

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// Queue metrics (when the store can list queues, driver.QueueLister):
//
//	dcsync_queue_partitions{queue}                        the queue's partition count
//	dcsync_queue_head{queue,partition}                    a partition's next sequence number
//	dcsync_queue_lag{queue,group,partition}               events a group has not acked in an event partition
//	dcsync_queue_group_lag{queue,group}                   the sum of the group's lag over its event partitions
//	dcsync_queue_dead_letters{queue,group}                events waiting in the group's dead-letter partition
//	dcsync_queue_offset_token{queue,group,partition}      the fencing token in the group's offset record
//
// One scrape costs per queue one spec read (the listing) and per group the bounds and
// offsets of its partitions in one batched read each (queue.Queue.Lag).

type queueDescs struct {
	partitions, head, lag, groupLag, dead, token *prometheus.Desc
}

func newQueueDescs() queueDescs {
	return queueDescs{
		partitions: prometheus.NewDesc("dcsync_queue_partitions", "Partitions of a queue.", []string{"queue"}, nil),
		head:       prometheus.NewDesc("dcsync_queue_head", "Next sequence number of an event partition.", []string{"queue", "partition"}, nil),
		lag:        prometheus.NewDesc("dcsync_queue_lag", "Events of an event partition a consumer group has not acked.", []string{"queue", "group", "partition"}, nil),
		groupLag:   prometheus.NewDesc("dcsync_queue_group_lag", "Events a consumer group has not acked, over all event partitions.", []string{"queue", "group"}, nil),
		dead:       prometheus.NewDesc("dcsync_queue_dead_letters", "Events in a consumer group's dead letters, not acked there.", []string{"queue", "group"}, nil),
		token:      prometheus.NewDesc("dcsync_queue_offset_token", "Fencing token in a group's offset record of a partition: its current or last owner's.", []string{"queue", "group", "partition"}, nil),
	}
}

func (d queueDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.partitions, d.head, d.lag, d.groupLag, d.dead, d.token} {
		ch <- x
	}
}

// collectQueues sends the queue metrics; it reports false when a read failed.
func (c *Collector) collectQueues(ctx context.Context, ch chan<- prometheus.Metric, failed func(string, error)) bool {
	if _, can := c.cfg.Store.(driver.QueueLister); !can {
		return true
	}
	specs, err := queue.List(ctx, c.cfg.Store)
	if err != nil {
		failed("queues", err)
		return false
	}
	ok := true
	d := c.queue
	for _, spec := range specs {
		ch <- prometheus.MustNewConstMetric(d.partitions, prometheus.GaugeValue, float64(spec.Partitions), spec.Name)
		q, err := queue.Open(ctx, c.cfg.Store, spec.Name, queue.WithLogger(c.cfg.Logger))
		if err != nil {
			failed("queue "+spec.Name, err)
			ok = false
			continue
		}
		for gi, g := range spec.Groups {
			lags, err := q.Lag(ctx, g)
			if err != nil {
				failed("queue "+spec.Name+" group "+g, err)
				ok = false
				continue
			}
			var sum uint64
			for _, l := range lags {
				if l.Dead {
					ch <- prometheus.MustNewConstMetric(d.dead, prometheus.GaugeValue, float64(l.Lag), spec.Name, g)
					continue
				}
				p := itoa(l.Partition)
				sum += l.Lag
				ch <- prometheus.MustNewConstMetric(d.lag, prometheus.GaugeValue, float64(l.Lag), spec.Name, g, p)
				ch <- prometheus.MustNewConstMetric(d.token, prometheus.GaugeValue, float64(l.Token), spec.Name, g, p)
				if gi == 0 {
					// Heads are the partition's, the same for every group: sent once.
					ch <- prometheus.MustNewConstMetric(d.head, prometheus.GaugeValue, float64(l.Head), spec.Name, p)
				}
			}
			ch <- prometheus.MustNewConstMetric(d.groupLag, prometheus.GaugeValue, float64(sum), spec.Name, g)
		}
	}
	return ok
}
