package hbaserpc

import "context"

// MetaServer returns the address ("host:port") of the region server hosting hbase:meta,
// as ZooKeeper names it (cached after the first lookup). On a cluster of one region
// server, as the tests run, it is the address every region is served at: what a test
// puts a fault proxy in front of (see Config.Dial).
func (c *Client) MetaServer(ctx context.Context) (string, error) {
	return c.metaLocation(ctx)
}
