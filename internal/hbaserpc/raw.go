package hbaserpc

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// CellType is what a stored cell is: a value or a delete marker (HBase's KeyValue.Type
// codes). Normal reads return values only; a raw read (Get.Raw) returns the markers too.
type CellType uint8

// The cell types.
const (
	// CellPut is a value.
	CellPut CellType = 4
	// CellDelete hides one version (its timestamp) of one column.
	CellDelete CellType = 8
	// CellDeleteFamilyVersion hides one version of every column of a family.
	CellDeleteFamilyVersion CellType = 10
	// CellDeleteColumn hides every version of one column up to its timestamp.
	CellDeleteColumn CellType = 12
	// CellDeleteFamily hides every version of every column of a family up to its
	// timestamp; a Delete of a whole row writes one per family.
	CellDeleteFamily CellType = 14
)

// rawAttribute is HBase's Scan.setRaw encoding (attribute "_raw_", Bytes.toBytes(true)).
// The region server runs a Get as a Scan built from it, attributes included, so a Get
// carrying it is raw too: it returns delete markers and the cells they hide, and counts
// versions up to the Get's own maximum rather than the family's. Cells whose TTL has
// passed are still left out. HBase refuses a raw read that names columns
// (DoNotRetryIOException "Cannot specify any column for a raw scan"): it reads whole
// rows. A memstore flush or a compaction drops hidden cells for
// good (a flush keeps the markers, a major compaction drops those too).
func rawAttribute() *pb.NameBytesPair {
	return &pb.NameBytesPair{Name: proto.String("_raw_"), Value: []byte{0xff}}
}

// proto converts g.
func (g Get) proto() *pb.Get {
	p := toGetProto(g.Row, g.Columns)
	if g.MaxVersions > 1 {
		p.MaxVersions = proto.Uint32(uint32(g.MaxVersions))
	}
	if g.Raw {
		p.Attribute = append(p.Attribute, rawAttribute())
	}
	return p
}

// CheckAndMutateGets is CheckAndMutate followed, in the same call to the region server,
// by gets of row (each Get's Row is ignored; it reads row). They run after the
// conditional mutation, as CheckAndMutateRead's Get does, and read[i] is what gets[i]
// returned. In-doubt attempts are retried as CheckAndMutate's are.
func (c *Client) CheckAndMutateGets(ctx context.Context, table string, row []byte, cond Condition, muts []Mutation, gets ...Get) (applied bool, mutated []Cell, read [][]Cell, err error) {
	ps := make([]*pb.Get, len(gets))
	for i, g := range gets {
		g.Row = row
		ps[i] = g.proto()
	}
	return c.checkAndMutate(ctx, "hbase.CheckAndMutateGets", table, row, cond, muts, ps)
}
