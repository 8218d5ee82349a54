package hbaserpc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// FamilySpec describes a column family to create.
type FamilySpec struct {
	// Name is the family name.
	Name string
	// MaxVersions is the VERSIONS attribute; 0 keeps HBase's default (1).
	MaxVersions int
	// TTL is the family TTL (whole seconds); 0 means forever.
	TTL time.Duration
	// Compression is the COMPRESSION attribute, such as "GZ"; empty means NONE.
	Compression string
	// Attributes are further attributes, by HBase name (e.g. "BLOOMFILTER": "ROW").
	Attributes map[string]string
}

// TableSpec describes a table to create.
type TableSpec struct {
	// Name is "ns:table", or "table" in the default namespace.
	Name string
	// Families are the column families; at least one.
	Families []FamilySpec
	// SplitKeys pre-split the table: n keys make n+1 regions. Sorted, distinct,
	// non-empty.
	SplitKeys [][]byte
}

// TableDescriptor is a table's schema as the master reports it.
type TableDescriptor struct {
	// Name is the table name.
	Name string
	// Attributes are the table-level attributes.
	Attributes map[string]string
	// Families are the column families with all their attributes (e.g. "VERSIONS",
	// "TTL", "COMPRESSION"), including HBase's defaults.
	Families []FamilyDescriptor
}

// FamilyDescriptor is one column family of a TableDescriptor.
type FamilyDescriptor struct {
	// Name is the family name.
	Name string
	// Attributes are the family's attributes by HBase name.
	Attributes map[string]string
}

func (f FamilySpec) toProto() (*pb.ColumnFamilySchema, error) {
	if f.Name == "" {
		return nil, errors.New("empty family name")
	}
	attrs := map[string]string{}
	for k, v := range f.Attributes {
		attrs[k] = v
	}
	if f.MaxVersions < 0 {
		return nil, fmt.Errorf("family %s: negative MaxVersions", f.Name)
	}
	if f.MaxVersions > 0 {
		attrs["VERSIONS"] = strconv.Itoa(f.MaxVersions)
	}
	if f.TTL < 0 {
		return nil, fmt.Errorf("family %s: negative TTL", f.Name)
	}
	if f.TTL > 0 {
		secs := int64(f.TTL / time.Second)
		if secs < 1 {
			secs = 1
		}
		attrs["TTL"] = strconv.FormatInt(secs, 10)
	}
	if f.Compression != "" {
		attrs["COMPRESSION"] = f.Compression
	}
	cf := &pb.ColumnFamilySchema{Name: []byte(f.Name)}
	for _, k := range sortedKeys(attrs) {
		cf.Attributes = append(cf.Attributes, &pb.BytesBytesPair{First: []byte(k), Second: []byte(attrs[k])})
	}
	return cf, nil
}

// masterLocation returns the active master's address, from the cache or
// ZooKeeper. Concurrent lookups share one ZooKeeper session.
func (c *Client) masterLocation(ctx context.Context) (string, error) {
	return c.serverLocation(ctx, &c.masterAddr, "\x00zk:master", c.lookupMaster)
}

// masterCall calls the active master, re-reading its location after failures.
func (c *Client) masterCall(ctx context.Context, op, method string, req, resp proto.Message, idempotent bool) error {
	return c.retry(ctx, op, idempotent, func(ctx context.Context) error {
		addr, err := c.masterLocation(ctx)
		if err != nil {
			return err
		}
		err = c.rpc(ctx, addr, serviceMaster, method, req, resp)
		if err != nil {
			switch k := classify(err); {
			case k == kindRetry || k == kindInDoubt:
				c.locMu.Lock()
				if c.masterAddr == addr {
					c.masterAddr = ""
				}
				c.locMu.Unlock()
			}
		}
		return err
	})
}

// TableExists reports whether table exists.
func (c *Client) TableExists(ctx context.Context, table string) (bool, error) {
	d, err := c.DescribeTable(ctx, table)
	if err != nil {
		if IsTableNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return d != nil, nil
}

// DescribeTable returns table's schema from the master. A missing table is an
// error for which IsTableNotFound is true.
func (c *Client) DescribeTable(ctx context.Context, table string) (*TableDescriptor, error) {
	const op = "hbase.DescribeTable"
	if err := validTable(op, table); err != nil {
		return nil, err
	}
	req := &pb.GetTableDescriptorsRequest{TableNames: []*pb.TableName{tableName(table)}}
	resp := &pb.GetTableDescriptorsResponse{}
	if err := c.masterCall(ctx, op, "GetTableDescriptors", req, resp, true); err != nil {
		return nil, err
	}
	for _, ts := range resp.GetTableSchema() {
		if tableString(ts.GetTableName()) != table {
			continue
		}
		d := &TableDescriptor{Name: table, Attributes: map[string]string{}}
		for _, a := range ts.GetAttributes() {
			d.Attributes[string(a.GetFirst())] = string(a.GetSecond())
		}
		for _, f := range ts.GetColumnFamilies() {
			fd := FamilyDescriptor{Name: string(f.GetName()), Attributes: map[string]string{}}
			for _, a := range f.GetAttributes() {
				fd.Attributes[string(a.GetFirst())] = string(a.GetSecond())
			}
			for _, a := range f.GetConfiguration() {
				fd.Attributes[a.GetName()] = a.GetValue()
			}
			d.Families = append(d.Families, fd)
		}
		return d, nil
	}
	return nil, driver.Errorf(dcsync.Internal, op, "%w", &RemoteError{Class: classTableNotFound, Message: table})
}

// CreateTable creates a table and waits until it is available (bounded by ctx).
// Failures are dcsync.TableCreation errors; IsTableExists tells an existing table.
func (c *Client) CreateTable(ctx context.Context, spec TableSpec) error {
	const op = "hbase.CreateTable"
	if err := validTable(op, spec.Name); err != nil {
		return err
	}
	if len(spec.Families) == 0 {
		return driver.Errorf(dcsync.InvalidArgument, op, "table %s: no column families", spec.Name)
	}
	schema := &pb.TableSchema{TableName: tableName(spec.Name)}
	for _, f := range spec.Families {
		cf, err := f.toProto()
		if err != nil {
			return driver.Errorf(dcsync.InvalidArgument, op, "table %s: %v", spec.Name, err)
		}
		schema.ColumnFamilies = append(schema.ColumnFamilies, cf)
	}
	for i, k := range spec.SplitKeys {
		if len(k) == 0 {
			return driver.Errorf(dcsync.InvalidArgument, op, "table %s: empty split key", spec.Name)
		}
		if i > 0 && string(spec.SplitKeys[i-1]) >= string(k) {
			return driver.Errorf(dcsync.InvalidArgument, op, "table %s: split keys not sorted and distinct", spec.Name)
		}
	}
	req := &pb.CreateTableRequest{
		TableSchema: schema,
		SplitKeys:   spec.SplitKeys,
		NonceGroup:  proto.Uint64(c.nonceGroup),
		Nonce:       proto.Uint64(c.newNonce()), // a retried create maps to the same procedure
	}
	resp := &pb.CreateTableResponse{}
	if err := c.masterCall(ctx, op, "CreateTable", req, resp, true); err != nil {
		return asTableCreation(op, err)
	}
	if err := c.waitProcedure(ctx, op, resp.GetProcId()); err != nil {
		return asTableCreation(op, err)
	}
	c.regions.invalidateTable(spec.Name)
	return nil
}

func asTableCreation(op string, err error) error {
	var de *dcsync.Error
	if errors.As(err, &de) && (de.Code == dcsync.Internal) {
		return &dcsync.Error{Code: dcsync.TableCreation, Op: op, Msg: "create table failed", Err: err}
	}
	return err
}

// DisableTable disables table and waits for it (bounded by ctx).
func (c *Client) DisableTable(ctx context.Context, table string) error {
	const op = "hbase.DisableTable"
	if err := validTable(op, table); err != nil {
		return err
	}
	req := &pb.DisableTableRequest{TableName: tableName(table), NonceGroup: proto.Uint64(c.nonceGroup), Nonce: proto.Uint64(c.newNonce())}
	resp := &pb.DisableTableResponse{}
	if err := c.masterCall(ctx, op, "DisableTable", req, resp, true); err != nil {
		return err
	}
	defer c.regions.invalidateTable(table)
	return c.waitProcedure(ctx, op, resp.GetProcId())
}

// EnableTable enables table and waits for it (bounded by ctx).
func (c *Client) EnableTable(ctx context.Context, table string) error {
	const op = "hbase.EnableTable"
	if err := validTable(op, table); err != nil {
		return err
	}
	req := &pb.EnableTableRequest{TableName: tableName(table), NonceGroup: proto.Uint64(c.nonceGroup), Nonce: proto.Uint64(c.newNonce())}
	resp := &pb.EnableTableResponse{}
	if err := c.masterCall(ctx, op, "EnableTable", req, resp, true); err != nil {
		return err
	}
	defer c.regions.invalidateTable(table)
	return c.waitProcedure(ctx, op, resp.GetProcId())
}

// DeleteTable deletes a disabled table and waits for it (bounded by ctx).
func (c *Client) DeleteTable(ctx context.Context, table string) error {
	const op = "hbase.DeleteTable"
	if err := validTable(op, table); err != nil {
		return err
	}
	req := &pb.DeleteTableRequest{TableName: tableName(table), NonceGroup: proto.Uint64(c.nonceGroup), Nonce: proto.Uint64(c.newNonce())}
	resp := &pb.DeleteTableResponse{}
	if err := c.masterCall(ctx, op, "DeleteTable", req, resp, true); err != nil {
		return err
	}
	defer c.regions.invalidateTable(table)
	return c.waitProcedure(ctx, op, resp.GetProcId())
}

// waitProcedure polls the master until procedure id finishes or ctx ends.
func (c *Client) waitProcedure(ctx context.Context, op string, id uint64) error {
	delay := 20 * time.Millisecond
	for {
		req := &pb.GetProcedureResultRequest{ProcId: proto.Uint64(id)}
		resp := &pb.GetProcedureResultResponse{}
		if err := c.masterCall(ctx, op, "getProcedureResult", req, resp, true); err != nil {
			return err
		}
		switch resp.GetState() {
		case pb.GetProcedureResultResponse_FINISHED:
			if ex := resp.GetException(); ex != nil {
				ge := ex.GetGenericException()
				re := &RemoteError{Class: ge.GetClassName(), Message: ge.GetMessage()}
				if re.Class == "" {
					re.Class = "ProcedureFailed"
					re.Message = ex.GetSource()
				}
				return driver.Errorf(dcsync.Internal, op, "procedure %d failed: %w", id, re)
			}
			return nil
		case pb.GetProcedureResultResponse_NOT_FOUND:
			// Completed long ago and evicted, or never existed: nothing to wait for.
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return driver.Errorf(dcsync.Connection, op, "waiting for procedure %d: %w", id, ctx.Err())
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// Regions lists table's regions from hbase:meta, in key order, and refreshes the
// region cache with them.
func (c *Client) Regions(ctx context.Context, table string) ([]Region, error) {
	const op = "hbase.Regions"
	if err := validTable(op, table); err != nil {
		return nil, err
	}
	var out []Region
	err := c.ScanFunc(ctx, metaTable, Scan{
		StartRow: append([]byte(table), ',', ','),
		StopRow:  append([]byte(table), ','+1), // '-': just past every "table,..." row
		Columns:  []Column{{Family: []byte("info")}},
	}, func(row Row) error {
		cells := make([]*pb.Cell, len(row.Cells))
		for i, cl := range row.Cells {
			cells[i] = &pb.Cell{Row: cl.Row, Family: cl.Family, Qualifier: cl.Qualifier, Value: cl.Value}
		}
		r, offline, err := parseMetaRow(table, cells)
		if err != nil {
			return err
		}
		if r == nil || offline {
			return nil
		}
		out = append(out, *r)
		if r.Server != "" {
			c.regions.add(r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
