package hbaserpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// zkLogger routes go-zookeeper's logging to slog at debug level.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug("zookeeper: " + fmt.Sprintf(format, args...))
}

// zkGet reads one znode with a short-lived ZooKeeper session, bounded by ctx and the
// dial timeout, connecting with Config.Dial. A session per lookup keeps no goroutine
// alive between lookups; the lookups are rare (only when a cached location is found
// stale), and concurrent ones share one session (see Client.serverLocation).
func (c *Client) zkGet(parent context.Context, path string) ([]byte, error) {
	if c.cfg.krb != nil && c.cfg.Kerberos.ZooKeeper {
		return c.zkSASLGet(parent, path)
	}
	ctx, cancel := context.WithTimeout(parent, max(c.cfg.DialTimeout, 2*time.Second))
	defer cancel()
	dialTimeout := c.cfg.DialTimeout
	dialer := func(network, address string, timeout time.Duration) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, min(timeout, dialTimeout))
		defer cancel()
		return c.cfg.Dial(dctx, network, address)
	}
	conn, events, err := zk.Connect(c.cfg.zkServers(), 10*time.Second,
		zk.WithLogger(zkLogger{c.log}), zk.WithDialer(dialer))
	if err != nil {
		return nil, &connError{err: fmt.Errorf("zookeeper %s: %w", c.cfg.ZKQuorum, err)}
	}
	defer func() {
		conn.Close()
		for range events { // closed when the session's goroutines are done
		}
	}()
	type result struct {
		data []byte
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		data, _, err := conn.Get(path)
		ch <- result{data, err}
	}()
	select {
	case r := <-ch:
		if errors.Is(r.err, zk.ErrNoNode) {
			return nil, &locateError{msg: "znode " + path + " does not exist (is HBase running?)", retry: true}
		}
		if r.err != nil && strings.Contains(r.err.Error(), "unknown error: -124") {
			// SESSIONCLOSEDREQUIRESASLAUTH, which go-zookeeper does not name.
			return nil, driver.Errorf(dcsync.Unauthenticated, "hbase.zookeeper", "ZooKeeper %s requires SASL (Kerberos) authentication of every client: use Kerberos with zk_sasl=true", c.cfg.ZKQuorum)
		}
		if r.err != nil {
			return nil, &connError{err: fmt.Errorf("zookeeper %s get %s: %w", c.cfg.ZKQuorum, path, r.err)}
		}
		return r.data, nil
	case <-ctx.Done():
		conn.Close()
		<-ch
		if err := parent.Err(); err != nil {
			return nil, err
		}
		return nil, &connError{err: fmt.Errorf("zookeeper %s unreachable: %w", c.cfg.ZKQuorum, ctx.Err())}
	}
}

// parseZNode strips HBase's znode metadata (0xFF, 4-byte length, id) and the
// "PBUF" magic, and unmarshals the rest into m.
func parseZNode(data []byte, m proto.Message) error {
	if len(data) > 0 && data[0] == 0xFF {
		if len(data) < 5 {
			return errors.New("znode data too short")
		}
		idLen := int(binary.BigEndian.Uint32(data[1:5]))
		if idLen < 0 || 5+idLen > len(data) {
			return errors.New("znode metadata length out of range")
		}
		data = data[5+idLen:]
	}
	if !bytes.HasPrefix(data, pbMagic) {
		return errors.New("znode data lacks the PBUF magic")
	}
	return proto.Unmarshal(data[len(pbMagic):], m)
}

var pbMagic = []byte("PBUF")

func serverAddr(sn *pb.ServerName) string {
	return net.JoinHostPort(sn.GetHostName(), strconv.Itoa(int(sn.GetPort())))
}

// lookupMeta reads the location of hbase:meta from ZooKeeper.
func (c *Client) lookupMeta(ctx context.Context) (string, error) {
	data, err := c.zkGet(ctx, c.cfg.ZKRoot+"/meta-region-server")
	if err != nil {
		return "", err
	}
	var m pb.MetaRegionServer
	if err := parseZNode(data, &m); err != nil {
		return "", fmt.Errorf("bad meta-region-server znode: %w", err)
	}
	if m.GetServer() == nil || m.GetServer().GetHostName() == "" {
		return "", &locateError{msg: "meta-region-server znode names no server", retry: true}
	}
	return serverAddr(m.GetServer()), nil
}

// lookupMaster reads the active master's location from ZooKeeper.
func (c *Client) lookupMaster(ctx context.Context) (string, error) {
	data, err := c.zkGet(ctx, c.cfg.ZKRoot+"/master")
	if err != nil {
		return "", err
	}
	var m pb.Master
	if err := parseZNode(data, &m); err != nil {
		return "", fmt.Errorf("bad master znode: %w", err)
	}
	if m.GetMaster() == nil || m.GetMaster().GetHostName() == "" {
		return "", &locateError{msg: "master znode names no server", retry: true}
	}
	return serverAddr(m.GetMaster()), nil
}
