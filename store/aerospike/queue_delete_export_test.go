package aerospike

import (
	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/driver"
)

// QueueIncBin is the bin of a queue's incarnation id, in its spec record and in every
// head, entry, offset and id record (see DeleteQueue).
const QueueIncBin = qbInc

// QueueRecordKeys returns the keys of every record a queue of spec may have, by kind,
// computed from the spec, the heads given (per storage partition) and the event ids
// given, independently of DeleteQueue.
func QueueRecordKeys(s *Store, spec driver.QueueSpec, heads []uint64, ids []string) map[string][]*as.Key {
	m := map[string][]*as.Key{"spec": {s.specKey(spec.Name)}}
	for p := 0; p < spec.StoragePartitions(); p++ {
		m["head"] = append(m["head"], s.headKey(spec.Name, p))
		for seq := uint64(0); seq < heads[p]; seq++ {
			m["entry"] = append(m["entry"], s.entryKey(spec.Name, p, seq))
		}
		for _, g := range spec.Groups {
			m["offset"] = append(m["offset"], s.offsetKey(spec.Name, g, p))
		}
	}
	for _, id := range ids {
		m["id"] = append(m["id"], s.idKey(spec.Name, id))
	}
	return m
}
