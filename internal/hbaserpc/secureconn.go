package hbaserpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/secure"
)

// tlsOp names TLS failures.
const tlsOp = "hbase.tls"

// secureConn makes nc, just dialed to addr, what cfg asks: TLS (Config.TLS) and the
// Kerberos exchange (Config.Kerberos, after the preamble). It returns the connection
// to use and the user name for the connection header (the Kerberos principal, or
// Config.User). deadline bounds it, and so does ctx; nc is closed on failure.
func secureConn(ctx context.Context, cfg Config, nc net.Conn, addr string, deadline time.Time) (net.Conn, string, error) {
	if cfg.TLS == nil && cfg.krb == nil {
		return nc, cfg.User, nil
	}
	_ = nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(err error) (net.Conn, string, error) {
		nc.Close()
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		return nil, "", err
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		if tc.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			tc.ServerName = host
		}
		tlsConn := tls.Client(nc, tc)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			if code, msg, ok := secure.HandshakeFailure(err, tc.ServerName); ok {
				if code == dcsync.Unauthenticated {
					return fail(driver.Errorf(code, tlsOp, "%s: %s: %v", addr, msg, err))
				}
				return fail(&connError{err: fmt.Errorf("tls with %s: %s: %w", addr, msg, err)})
			}
			return fail(&connError{err: fmt.Errorf("tls with %s: %w", addr, err)})
		}
		nc = tlsConn
	}
	user := cfg.User
	if cfg.krb != nil {
		pre := append(append([]byte{}, connPreamble[:5]...), authKerberos)
		if _, err := nc.Write(pre); err != nil {
			return fail(&connError{err: fmt.Errorf("handshake with %s: %w", addr, err)})
		}
		if err := cfg.krb.handshake(nc, addr); err != nil {
			var de *dcsync.Error
			if !errors.As(err, &de) {
				var ce *connError
				if !errors.As(err, &ce) {
					err = driver.Errorf(dcsync.Unauthenticated, kerberosOp, "%s: %w", addr, err)
				}
			}
			return fail(err)
		}
		user = cfg.krb.principal
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, user, nil
}
