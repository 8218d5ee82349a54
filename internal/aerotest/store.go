package aerotest

import (
	"time"
)

// citrusleafEpoch is 2010-01-01T00:00:00Z, the origin of wire void-times.
const citrusleafEpoch = 1262304000

// maxTTL is the server's default max-ttl (10 years); larger TTLs are rejected.
const maxTTL = 10 * 365 * 24 * 3600

const (
	ttlNamespaceDefault = 0
	ttlNeverExpire      = 0xFFFFFFFF
	ttlDontUpdate       = 0xFFFFFFFE
)

const (
	maxBinNameLen = 15
	maxSetNameLen = 63
)

type bin struct {
	name string
	val  any
}

// userKey is the key sent with SendKey (particle type plus particle bytes).
type userKey struct {
	ptype byte
	data  []byte
}

func (k *userKey) value() any {
	if k == nil {
		return nil
	}
	v, err := particleToValue(k.ptype, k.data)
	if err != nil {
		return nil
	}
	return v
}

type record struct {
	gen        uint32
	voidTime   uint32 // seconds since citrusleafEpoch; 0 = never expires
	lastUpdate time.Time
	set        string
	key        *userKey
	bins       []bin
}

func (r *record) clone() *record {
	c := *r
	c.bins = append([]bin(nil), r.bins...)
	return &c
}

func (r *record) binIndex(name string) int {
	for i := range r.bins {
		if r.bins[i].name == name {
			return i
		}
	}
	return -1
}

func (r *record) get(name string) (any, bool) {
	if i := r.binIndex(name); i >= 0 {
		return r.bins[i].val, true
	}
	return nil, false
}

// setBin writes a bin; a nil value deletes it. New bins go last; a deleted
// bin's slot takes the last bin, as the server's as_bin_remove does, so the
// order of bins in read-all replies matches the server's.
func (r *record) setBin(name string, v any) {
	i := r.binIndex(name)
	switch {
	case v == nil && i >= 0:
		bins := append([]bin(nil), r.bins...)
		last := len(bins) - 1
		bins[i] = bins[last]
		r.bins = bins[:last]
	case v == nil:
	case i >= 0:
		r.bins[i].val = v
	default:
		r.bins = append(r.bins, bin{name: name, val: v})
	}
}

func nowCL(now time.Time) int64 { return now.Unix() - citrusleafEpoch }

func (r *record) expired(now time.Time) bool {
	// As the server's as_record_is_expired: void_time < now, in whole seconds, so a
	// TTL of t seconds lives between t and t+1 seconds.
	return r.voidTime != 0 && nowCL(now) > int64(r.voidTime)
}

func nextGeneration(g uint32) uint32 {
	g++
	if g > 0xFFFF {
		g = 1
	}
	return g
}

type namespace struct {
	name    string
	records map[[20]byte]*record
	// nsupDisabled models nsup-period 0 without allow-ttl-without-nsup:
	// writes that would give a record a TTL fail with FAIL_FORBIDDEN.
	nsupDisabled bool
}

// lookup returns the live record for digest; an expired record is
// removed once nsup has reaped it (see reaped).
func (ns *namespace) lookup(d [20]byte, now time.Time, nsup nsupClock) *record {
	r := ns.records[d]
	if r == nil || !r.expired(now) {
		return r
	}
	if nsup.reaped(r, now) {
		delete(ns.records, d)
	}
	return nil
}

// lookupForDelete is lookup for a delete, which, as the server's
// delete_master, finds an expired record nsup has not reaped yet.
func (ns *namespace) lookupForDelete(d [20]byte, now time.Time, nsup nsupClock) *record {
	r := ns.records[d]
	if r != nil && r.expired(now) && nsup.reaped(r, now) {
		delete(ns.records, d)
		return nil
	}
	return r
}

// nsupClock models when the server's nsup thread reaps expired records:
// with a period, passes run every period from start; without, a record is
// reaped the moment it expires.
type nsupClock struct {
	start  time.Time
	period time.Duration
}

func (c nsupClock) reaped(r *record, now time.Time) bool {
	if c.period <= 0 {
		return true
	}
	// The record is expired from the second after its void-time.
	expiry := time.Unix(int64(r.voidTime)+citrusleafEpoch+1, 0)
	k := expiry.Sub(c.start) / c.period
	if k < 1 {
		k = 1
	}
	pass := c.start.Add(k * c.period)
	for pass.Before(expiry) {
		pass = pass.Add(c.period)
	}
	return !now.Before(pass)
}
