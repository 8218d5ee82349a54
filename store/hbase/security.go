package hbase

import (
	"crypto/tls"
	"net/url"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/internal/secure"
)

// Kerberos configures Kerberos (SASL GSSAPI) authentication to a cluster with
// hbase.security.authentication=kerberos, as HBase's Java client does it
// (docs/stores/hbase.md, "Security"). The quality of protection spoken is
// "authentication" (hbase.rpc.protection=authentication): the client and the servers
// prove who they are to each other, and the traffic is protected by TLS (Options.TLS)
// if at all. ZooKeeper is reached without authentication unless ZooKeeperSASL is
// set.
type Kerberos struct {
	// Principal is the client's principal, "name@REALM" or "name" (krb5.conf's default
	// realm). Required with Keytab; with the credential cache it defaults to the
	// cache's principal.
	Principal string
	// Keytab is the path of a keytab with Principal's keys (refused when others may
	// read it). With a keytab the client logs in itself and renews its tickets for as
	// long as it runs: the choice for long-running processes. "" uses the credential
	// cache.
	Keytab string
	// CCache is the credential cache (kinit's) used without a keytab. Default
	// $KRB5CCNAME, else /tmp/krb5cc_UID. Its tickets are not renewed by dcsync.
	CCache string
	// Krb5Conf is the path of krb5.conf. Default $KRB5_CONFIG, else /etc/krb5.conf.
	Krb5Conf string
	// ServerPrincipal is HBase's principal (hbase.regionserver.kerberos.principal),
	// "_HOST" standing for each server's host name as HBase advertises it. Default
	// "hbase/_HOST".
	ServerPrincipal string
	// ZooKeeperSASL authenticates the ZooKeeper sessions too (SASL GSSAPI, the
	// principal above), for a quorum that requires SASL of every client
	// (zookeeper.sessionRequireClientSASLAuth=true, enforce.auth.schemes=sasl). A
	// client without it gets Unauthenticated from such a quorum.
	ZooKeeperSASL bool
	// ZKServerPrincipal is ZooKeeper's principal, "_HOST" standing for each ZooKeeper
	// server's host name in lower case (an IP address is resolved to its name first).
	// Default "zookeeper/_HOST".
	ZKServerPrincipal string
}

func (k *Kerberos) rpc() *hbaserpc.Kerberos {
	if k == nil {
		return nil
	}
	return &hbaserpc.Kerberos{Principal: k.Principal, Keytab: k.Keytab, CCache: k.CCache, Krb5Conf: k.Krb5Conf, ServicePrincipal: k.ServerPrincipal,
		ZooKeeper: k.ZooKeeperSASL, ZKServicePrincipal: k.ZKServerPrincipal}
}

// securityParams are OpenURL's security parameters (docs/secure-clusters.md).
var securityParams = map[string]bool{
	"kerberos": true, "principal": true, "keytab": true, "ccache": true, "krb5_conf": true, "server_principal": true,
	"zk_sasl": true, "zk_server_principal": true,
	"tls": true, "tls_ca": true, "tls_cert": true, "tls_key": true, "tls_name": true,
}

// parseSecurity reads the security parameters of q: Kerberos (kerberos=true, or any of
// principal, keytab, ccache, krb5_conf, server_principal, zk_server_principal), with
// zk_sasl=true the ZooKeeper sessions too, and TLS (secure.ParseTLS).
func parseSecurity(op string, q url.Values) (*hbaserpc.Kerberos, *tls.Config, error) {
	get := func(k string) string {
		if vs := q[k]; len(vs) > 0 {
			return vs[len(vs)-1]
		}
		return ""
	}
	k := &Kerberos{Principal: get("principal"), Keytab: get("keytab"), CCache: get("ccache"),
		Krb5Conf: get("krb5_conf"), ServerPrincipal: get("server_principal"), ZKServerPrincipal: get("zk_server_principal")}
	switch v := get("zk_sasl"); v {
	case "", "false":
	case "true":
		k.ZooKeeperSASL = true
	default:
		return nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "zk_sasl %q is not true or false", v)
	}
	on := *k != Kerberos{}
	switch v := get("kerberos"); v {
	case "":
	case "true":
		on = true
	case "false":
		if on {
			return nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "kerberos=false with Kerberos parameters: drop one or the other")
		}
	default:
		return nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "kerberos %q is not true or false", v)
	}
	if !on {
		k = nil
	}
	t, err := secure.ParseTLS(op, get)
	if err != nil {
		return nil, nil, err
	}
	tc, err := t.Config(op)
	if err != nil {
		return nil, nil, err
	}
	return k.rpc(), tc, nil
}
