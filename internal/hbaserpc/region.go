package hbaserpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// metaRegionName is the region name of the (single) hbase:meta region.
var metaRegionName = []byte("hbase:meta,,1")

// metaTable is the catalog table's name.
const metaTable = "hbase:meta"

// Region describes one region of a table and where it is served.
type Region struct {
	// Table is the table's name ("ns:table", or "table" in the default namespace).
	Table string
	// Name is the full region name ("table,startkey,id.encoded.").
	Name []byte
	// StartKey is the first row of the region, empty for the first region.
	StartKey []byte
	// EndKey is the first row past the region, empty for the last region.
	EndKey []byte
	// Server is the serving region server as "host:port".
	Server string
}

// contains reports whether row falls in [StartKey, EndKey).
func (r *Region) contains(row []byte) bool {
	return bytes.Compare(row, r.StartKey) >= 0 && (len(r.EndKey) == 0 || bytes.Compare(row, r.EndKey) < 0)
}

// regionCache holds known region locations per table, sorted by start key. The
// entries of a table never overlap.
type regionCache struct {
	mu     sync.RWMutex
	tables map[string][]*Region
}

func newRegionCache() *regionCache { return &regionCache{tables: make(map[string][]*Region)} }

// lookup returns the cached region of table that contains row, or nil.
func (rc *regionCache) lookup(table string, row []byte) *Region {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	regs := rc.tables[table]
	// The last region whose start key is <= row.
	i := sort.Search(len(regs), func(i int) bool { return bytes.Compare(regs[i].StartKey, row) > 0 }) - 1
	if i < 0 || !regs[i].contains(row) {
		return nil
	}
	return regs[i]
}

// add caches r, evicting every cached region of its table that overlaps it.
func (rc *regionCache) add(r *Region) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	regs := rc.tables[r.Table]
	out := make([]*Region, 0, len(regs)+1)
	for _, o := range regs {
		if overlaps(o, r) {
			continue
		}
		out = append(out, o)
	}
	i := sort.Search(len(out), func(i int) bool { return bytes.Compare(out[i].StartKey, r.StartKey) > 0 })
	out = append(out, nil)
	copy(out[i+1:], out[i:])
	out[i] = r
	rc.tables[r.Table] = out
}

func overlaps(a, b *Region) bool {
	// [a.start, a.end) and [b.start, b.end) overlap when each starts before the other ends.
	aBeforeBEnd := len(b.EndKey) == 0 || bytes.Compare(a.StartKey, b.EndKey) < 0
	bBeforeAEnd := len(a.EndKey) == 0 || bytes.Compare(b.StartKey, a.EndKey) < 0
	return aBeforeBEnd && bBeforeAEnd
}

// invalidate drops r (matched by name) from the cache.
func (rc *regionCache) invalidate(r *Region) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	regs := rc.tables[r.Table]
	for i, o := range regs {
		if bytes.Equal(o.Name, r.Name) {
			rc.tables[r.Table] = append(regs[:i:i], regs[i+1:]...)
			return
		}
	}
}

// invalidateServer drops every region served by addr.
func (rc *regionCache) invalidateServer(addr string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for t, regs := range rc.tables {
		out := regs[:0:0]
		for _, o := range regs {
			if o.Server != addr {
				out = append(out, o)
			}
		}
		rc.tables[t] = out
	}
}

// invalidateTable drops every cached region of table.
func (rc *regionCache) invalidateTable(table string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.tables, table)
}

// tableName splits "ns:table" into its protobuf form; no namespace means "default".
func tableName(table string) *pb.TableName {
	ns, q, ok := strings.Cut(table, ":")
	if !ok {
		ns, q = "default", table
	}
	return &pb.TableName{Namespace: []byte(ns), Qualifier: []byte(q)}
}

// tableString is the inverse of tableName: the default namespace is omitted.
func tableString(tn *pb.TableName) string {
	if ns := string(tn.GetNamespace()); ns != "default" && ns != "" {
		return ns + ":" + string(tn.GetQualifier())
	}
	return string(tn.GetQualifier())
}

// metaKey is the hbase:meta row to start a reverse scan from to find the region of
// table holding row: "table,row,99999999999999" sorts after every region name of
// table whose start key is <= row.
func metaKey(table string, row []byte) []byte {
	k := make([]byte, 0, len(table)+len(row)+16)
	k = append(k, table...)
	k = append(k, ',')
	k = append(k, row...)
	k = append(k, ",99999999999999"...)
	return k
}

// parseMetaRow reads a region's location from an hbase:meta row. It returns
// (nil, false, nil) for rows of other tables.
func parseMetaRow(table string, cells []*pb.Cell) (r *Region, offline bool, err error) {
	var info *pb.RegionInfo
	var server, state string
	for _, c := range cells {
		if string(c.GetFamily()) != "info" {
			continue
		}
		switch string(c.GetQualifier()) {
		case "regioninfo":
			v := c.GetValue()
			if !bytes.HasPrefix(v, pbMagic) {
				return nil, false, fmt.Errorf("meta row %q: regioninfo lacks the PBUF magic", c.GetRow())
			}
			info = &pb.RegionInfo{}
			if err := proto.Unmarshal(v[len(pbMagic):], info); err != nil {
				return nil, false, fmt.Errorf("meta row %q: bad regioninfo: %w", c.GetRow(), err)
			}
		case "server":
			server = string(c.GetValue())
		case "state":
			state = string(c.GetValue())
		}
	}
	if info == nil {
		return nil, false, nil
	}
	if tableString(info.GetTableName()) != table {
		return nil, false, nil
	}
	if len(cells) == 0 {
		return nil, false, nil
	}
	r = &Region{
		Table:    table,
		Name:     cells[0].GetRow(),
		StartKey: info.GetStartKey(),
		EndKey:   info.GetEndKey(),
		Server:   server,
	}
	if state != "" && state != "OPEN" {
		r.Server = "" // closed, opening, or moving: not servable yet
	}
	if r.Server != "" {
		if _, _, err := net.SplitHostPort(r.Server); err != nil {
			return nil, false, fmt.Errorf("meta row %q: bad server %q", r.Name, r.Server)
		}
	}
	return r, info.GetOffline() || info.GetSplit(), nil
}

// metaLocation returns the address of the server hosting hbase:meta, from the
// cache or ZooKeeper. Concurrent lookups share one ZooKeeper session.
func (c *Client) metaLocation(ctx context.Context) (string, error) {
	return c.serverLocation(ctx, &c.metaAddr, "\x00zk:meta", c.lookupMeta)
}

// serverLocation returns *cached (guarded by locMu), or looks it up once for all
// concurrent callers with lookup and caches it.
func (c *Client) serverLocation(ctx context.Context, cached *string, key string, lookup func(context.Context) (string, error)) (string, error) {
	c.locMu.Lock()
	addr := *cached
	c.locMu.Unlock()
	if addr != "" {
		return addr, nil
	}
	v, err := c.shared(ctx, key, func(ctx context.Context) (any, error) {
		addr, err := lookup(ctx)
		if err != nil {
			return "", err
		}
		c.locMu.Lock()
		*cached = addr
		c.locMu.Unlock()
		return addr, nil
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

func (c *Client) forgetMeta(addr string) {
	c.locMu.Lock()
	if c.metaAddr == addr {
		c.metaAddr = ""
	}
	c.locMu.Unlock()
}

// metaRegion is the hbase:meta region as a Region served at addr.
func metaRegion(addr string) *Region {
	return &Region{Table: metaTable, Name: metaRegionName, Server: addr}
}

// locate returns the region of table holding row, from the cache or hbase:meta.
// One attempt: errors are classified by the caller's retry loop.
func (c *Client) locate(ctx context.Context, table string, row []byte) (*Region, error) {
	if table == metaTable {
		addr, err := c.metaLocation(ctx)
		if err != nil {
			return nil, err
		}
		return metaRegion(addr), nil
	}
	for {
		if r := c.regions.lookup(table, row); r != nil {
			return r, nil
		}
		// One hbase:meta lookup per table at a time: callers that arrive while one
		// runs wait for it, then look in the cache again (it may have found their
		// region too, or prefetched it), so a burst of callers relocating one region
		// (after a connection broke, or the region moved) makes one lookup, not one
		// each. The price: lookups of different regions of one table are serialised.
		v, err := c.shared(ctx, "region:"+table, func(ctx context.Context) (any, error) {
			if r := c.regions.lookup(table, row); r != nil {
				return r, nil
			}
			return c.lookupRegion(ctx, table, row)
		})
		if r, ok := v.(*Region); ok && r != nil && r.contains(row) {
			return r, nil
		}
		if err != nil {
			return nil, err
		}
		// It was another caller's lookup, for another region: look again.
	}
}

// lookupRegion reads the location of the region of table holding row from
// hbase:meta and caches it, with a few regions before it.
func (c *Client) lookupRegion(ctx context.Context, table string, row []byte) (*Region, error) {
	addr, err := c.metaLocation(ctx)
	if err != nil {
		return nil, err
	}
	// A small reversed scan of hbase:meta from "table,row,99999999999999" down to
	// "table,,": its first row is the region holding row (what HBase 2.x clients do).
	// A few more rows prefetch the regions just before.
	scan := &pb.Scan{
		StartRow:        metaKey(table, row),
		StopRow:         append([]byte(table), ',', ','),
		Reversed:        proto.Bool(true),
		Column:          []*pb.Column{{Family: []byte("info")}},
		Caching:         proto.Uint32(prefetchRegions),
		ReadType:        pb.Scan_PREAD.Enum(),
		IncludeStopRow:  proto.Bool(false),
		IncludeStartRow: proto.Bool(true),
	}
	meta := metaRegion(addr)
	c.metaScans.Add(1)
	req := &pb.ScanRequest{
		Region:                regionSpec(meta),
		Scan:                  scan,
		NumberOfRows:          proto.Uint32(prefetchRegions),
		CloseScanner:          proto.Bool(true),
		LimitOfRows:           proto.Uint32(prefetchRegions),
		ClientHandlesPartials: proto.Bool(false),
	}
	resp := &pb.ScanResponse{}
	if err := c.rpc(ctx, meta.Server, serviceClient, "Scan", req, resp); err != nil {
		c.noteFailure(meta, err)
		return nil, err
	}
	var found *Region
	for i, res := range resp.GetResults() {
		r, offline, err := parseMetaRow(table, res.GetCell())
		if err != nil {
			return nil, err
		}
		if r == nil {
			if i == 0 {
				return nil, &RemoteError{Class: classTableNotFound, Message: table}
			}
			break
		}
		if offline || r.Server == "" {
			if found == nil && r.contains(row) && !offline {
				if disabled, err := c.tableDisabled(ctx, meta, table); err == nil && disabled {
					return nil, &RemoteError{Class: classTableNotEnabled, Message: table + " is disabled", DoNotRetry: true}
				}
				return nil, &RemoteError{Class: classNoServerForRegion, Message: fmt.Sprintf("no server for region %q", r.Name)}
			}
			continue
		}
		if found == nil {
			if !r.contains(row) {
				return nil, &locateError{msg: fmt.Sprintf("no region of %s holds row %q (region in transition?)", table, row), retry: true}
			}
			found = r
		}
		c.regions.add(r)
	}
	if found == nil {
		if len(resp.GetResults()) == 0 {
			return nil, &RemoteError{Class: classTableNotFound, Message: table}
		}
		return nil, &locateError{msg: fmt.Sprintf("no online region of %s holds row %q", table, row), retry: true}
	}
	return found, nil
}

// prefetchRegions is how many hbase:meta rows one lookup reads.
const prefetchRegions = 10

func regionSpec(r *Region) *pb.RegionSpecifier {
	return &pb.RegionSpecifier{Type: pb.RegionSpecifier_REGION_NAME.Enum(), Value: r.Name}
}

// noteFailure updates the location caches after a failed call to region r: a
// server exception saying the region is not there drops that region; a transport
// failure drops everything cached on that server.
func (c *Client) noteFailure(r *Region, err error) {
	if re, ok := asRemote(err); ok {
		if !re.regionError() {
			return // e.g. a busy server: the location is still right
		}
		if r.Table == metaTable {
			c.forgetMeta(r.Server)
		} else {
			c.regions.invalidate(r)
		}
		return
	}
	if k := classify(err); k != kindRetry && k != kindInDoubt {
		return
	}
	var te *timeoutError
	if errors.As(err, &te) && !te.closed {
		return // a slow server is not a moved region
	}
	// A broken connection, or one closed because the server went silent: whatever
	// was cached on that server is looked up again (it may have moved elsewhere).
	if r.Table == metaTable {
		c.forgetMeta(r.Server)
	}
	c.regions.invalidateServer(r.Server)
}

// tableDisabled reads table's state from hbase:meta (row = table name, column
// table:state, a serialized TableState), as HBase 2.x stores it.
func (c *Client) tableDisabled(ctx context.Context, meta *Region, table string) (bool, error) {
	req := &pb.GetRequest{Region: regionSpec(meta), Get: &pb.Get{
		Row:    []byte(table),
		Column: []*pb.Column{{Family: []byte("table"), Qualifier: [][]byte{[]byte("state")}}},
	}}
	resp := &pb.GetResponse{}
	if err := c.rpc(ctx, meta.Server, serviceClient, "Get", req, resp); err != nil {
		return false, err
	}
	cells := resp.GetResult().GetCell()
	if len(cells) == 0 {
		return false, nil
	}
	v := bytes.TrimPrefix(cells[0].GetValue(), pbMagic) // stored without the magic in 2.6
	var ts pb.TableState
	if err := proto.Unmarshal(v, &ts); err != nil {
		return false, fmt.Errorf("bad table state of %s: %w", table, err)
	}
	st := ts.GetState()
	return st == pb.TableState_DISABLED || st == pb.TableState_DISABLING, nil
}
