package hbaserpc

import (
	"bytes"
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// Scan describes a forward scan over a row range.
type Scan struct {
	// StartRow is the first row to return (inclusive); empty starts at the table's
	// first row.
	StartRow []byte
	// StopRow ends the scan (exclusive); empty scans to the table's end.
	StopRow []byte
	// Columns restricts the cells returned; empty returns whole rows.
	Columns []Column
	// Limit caps the number of rows returned; 0 means no limit.
	Limit int
	// Caching is how many rows one RPC fetches. Default 100.
	Caching int
}

// Row is one row returned by a scan.
type Row struct {
	// Key is the row key.
	Key []byte
	// Cells are the row's cells, sorted as HBase sorts them.
	Cells []Cell
}

// Scan reads the rows of table that s selects, in row order.
func (c *Client) Scan(ctx context.Context, table string, s Scan) ([]Row, error) {
	var rows []Row
	err := c.ScanFunc(ctx, table, s, func(r Row) error {
		rows = append(rows, r)
		return nil
	})
	return rows, err
}

// errStopScan is returned by fn internally to stop without error.
var errStopScan = errors.New("stop scan")

// ScanFunc calls fn for each row of table that s selects, in row order, fetching
// rows in batches region by region. A non-nil error from fn stops the scan and is
// returned as is. After a failure mid-scan the scan resumes after the last row
// delivered, so fn never sees a row twice.
func (c *Client) ScanFunc(ctx context.Context, table string, s Scan, fn func(Row) error) error {
	const op = "hbase.Scan"
	if err := validTable(op, table); err != nil {
		return err
	}
	if s.Limit < 0 {
		return driver.Errorf(dcsync.InvalidArgument, op, "negative limit")
	}
	caching := s.Caching
	if caching <= 0 {
		caching = 100
	}
	start := append([]byte(nil), s.StartRow...)
	delivered := 0
	var fnErr error
	for {
		if s.Limit > 0 && delivered >= s.Limit {
			return nil
		}
		if len(s.StopRow) > 0 && bytes.Compare(start, s.StopRow) >= 0 {
			return nil
		}
		var region *Region
		var finished bool // the server said the whole scan is done
		err := c.retry(ctx, op, true, func(ctx context.Context) error {
			r, err := c.locate(ctx, table, start)
			if err != nil {
				return err
			}
			region = r
			err = c.scanRegion(ctx, r, s, start, caching, s.Limit-delivered, func(row Row) error {
				if err := fn(row); err != nil {
					fnErr = err
					return errStopScan
				}
				delivered++
				// Resume after this row should anything fail later.
				start = append(append(start[:0:0], row.Key...), 0)
				if s.Limit > 0 && delivered >= s.Limit {
					return errStopScan
				}
				return nil
			}, &finished)
			if err != nil && !errors.Is(err, errStopScan) {
				c.noteFailure(r, err)
				return err
			}
			return nil
		})
		if fnErr != nil {
			return fnErr
		}
		if err != nil {
			return err
		}
		if finished || len(region.EndKey) == 0 {
			return nil
		}
		if len(s.StopRow) > 0 && bytes.Compare(region.EndKey, s.StopRow) >= 0 {
			return nil
		}
		if bytes.Compare(region.EndKey, start) > 0 {
			start = append([]byte(nil), region.EndKey...)
		}
	}
}

// scanRegion scans region r from start, passing rows to deliver, until the region
// (or the scan) is exhausted or deliver returns an error.
func (c *Client) scanRegion(ctx context.Context, r *Region, s Scan, start []byte, caching, limit int, deliver func(Row) error, finished *bool) error {
	g := toGetProto(nil, s.Columns)
	scan := &pb.Scan{
		Column:   g.Column,
		StartRow: start,
		StopRow:  s.StopRow,
		Caching:  proto.Uint32(uint32(caching)),
	}
	req := &pb.ScanRequest{
		Region:                regionSpec(r),
		Scan:                  scan,
		NumberOfRows:          proto.Uint32(uint32(caching)),
		ClientHandlesPartials: proto.Bool(false),
	}
	if limit > 0 {
		req.LimitOfRows = proto.Uint32(uint32(limit))
		if limit < caching {
			req.NumberOfRows = proto.Uint32(uint32(limit))
		}
	}
	var scannerID uint64
	open := false
	defer func() {
		if open {
			// Best effort, detached from a possibly-cancelled ctx but bounded.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.RPCTimeout)
			defer cancel()
			_ = c.rpc(cctx, r.Server, serviceClient, "Scan",
				&pb.ScanRequest{ScannerId: proto.Uint64(scannerID), CloseScanner: proto.Bool(true), NumberOfRows: proto.Uint32(0)},
				&pb.ScanResponse{})
		}
	}()
	for {
		resp := &pb.ScanResponse{}
		if err := c.rpc(ctx, r.Server, serviceClient, "Scan", req, resp); err != nil {
			if classify(err) == kindInDoubt || classify(err) == kindCancelled {
				open = false // the connection is gone, and the scanner with it... or will lapse
			}
			return err
		}
		if resp.ScannerId != nil {
			scannerID = resp.GetScannerId()
			open = true
		}
		for _, res := range resp.GetResults() {
			cells := cellsFromResult(res)
			if len(cells) == 0 {
				continue
			}
			if err := deliver(Row{Key: cells[0].Row, Cells: cells}); err != nil {
				return err
			}
		}
		if resp.MoreResults != nil && !resp.GetMoreResults() {
			open = false // the server closed the scanner
			*finished = true
			return nil
		}
		if resp.MoreResultsInRegion != nil && !resp.GetMoreResultsInRegion() {
			open = false // region exhausted: the server closed the scanner
			return nil
		}
		if !open {
			return nil
		}
		req = &pb.ScanRequest{
			ScannerId:             proto.Uint64(scannerID),
			NumberOfRows:          proto.Uint32(uint32(caching)),
			ClientHandlesPartials: proto.Bool(false),
		}
	}
}
