package aerotest

import (
	"encoding/binary"
	"errors"
)

// Batch row type bits (client command.go _BATCH_MSG_*).
const (
	batchRepeat = 0x1
	batchInfo   = 0x2
	batchGen    = 0x4
	batchTTL    = 0x8
	batchInfo4  = 0x10
)

type batchRow struct {
	index uint32
	req   *request
}

// parseBatch decodes a batch index field (41, or the older 42) into rows.
// filter is the batch-level filter expression, applied to rows without one.
func parseBatch(data []byte, filter []byte) ([]batchRow, error) {
	if len(data) < 5 {
		return nil, errors.New("short batch field")
	}
	count := int(binary.BigEndian.Uint32(data))
	p := data[5:]
	rows := make([]batchRow, 0, min(count, 1<<16))
	var prev *request
	for i := 0; i < count; i++ {
		if len(p) < 25 {
			return nil, errors.New("truncated batch row")
		}
		row := batchRow{index: binary.BigEndian.Uint32(p)}
		var digest [20]byte
		copy(digest[:], p[4:24])
		typ := p[24]
		p = p[25:]
		if typ&batchRepeat != 0 {
			if prev == nil {
				return nil, errors.New("batch REPEAT on the first row")
			}
			q := *prev
			q.digest = digest
			q.key = nil
			row.req = &q
			rows = append(rows, row)
			continue
		}
		q := &request{digest: digest, hasDigest: true}
		need := 1
		if typ&batchInfo != 0 {
			need = 3
		}
		if len(p) < need {
			return nil, errors.New("truncated batch row header")
		}
		q.info1 = p[0]
		if typ&batchInfo != 0 {
			q.info2, q.info3 = p[1], p[2]
		}
		p = p[need:]
		if typ&batchInfo4 != 0 {
			if len(p) < 1 {
				return nil, errors.New("truncated batch info4")
			}
			q.info4 = p[0]
			p = p[1:]
		}
		if typ&batchGen != 0 {
			if len(p) < 2 {
				return nil, errors.New("truncated batch generation")
			}
			q.generation = uint32(binary.BigEndian.Uint16(p))
			p = p[2:]
		}
		if typ&batchTTL != 0 {
			if len(p) < 4 {
				return nil, errors.New("truncated batch ttl")
			}
			q.ttl = binary.BigEndian.Uint32(p)
			p = p[4:]
		}
		if len(p) < 4 {
			return nil, errors.New("truncated batch row counts")
		}
		nFields := int(binary.BigEndian.Uint16(p))
		nOps := int(binary.BigEndian.Uint16(p[2:]))
		p = p[4:]
		var fields []wireField
		var err error
		fields, p, err = parseFields(p, nFields)
		if err != nil {
			return nil, err
		}
		q.ops, p, err = parseOps(p, nOps)
		if err != nil {
			return nil, err
		}
		if oerr := q.applyFields(fields); oerr != nil {
			return nil, oerr
		}
		if q.filter == nil {
			q.filter = filter
		}
		// A batch write row carries the respond-all-ops semantics of operate.
		row.req = q
		prev = q
		rows = append(rows, row)
	}
	return rows, nil
}
