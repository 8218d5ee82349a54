package aerotest

import (
	"encoding/base64"
	"sort"
	"strconv"
	"strings"
)

const (
	serverBuild    = "8.1.2.0"
	partitionCount = 4096
)

var allPartitionsBitmap = base64.StdEncoding.EncodeToString(func() []byte {
	b := make([]byte, partitionCount/8)
	for i := range b {
		b[i] = 0xff
	}
	return b
}())

// handleInfo answers an info request: one "name\tvalue\n" line per name.
func (s *Server) handleInfo(body []byte) []byte {
	var out strings.Builder
	for _, name := range strings.Split(string(body), "\n") {
		if name == "" {
			continue
		}
		out.WriteString(name)
		out.WriteByte('\t')
		out.WriteString(s.infoValue(name))
		out.WriteByte('\n')
	}
	return []byte(out.String())
}

func (s *Server) sortedNamespaces() []string {
	names := make([]string, 0, len(s.namespaces))
	for n := range s.namespaces {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (s *Server) infoValue(name string) string {
	cmd, params, _ := strings.Cut(name, ":")
	port := strconv.Itoa(s.Port())
	nss := s.sortedNamespaces()
	perNS := func(f func(ns string) string) string {
		parts := make([]string, len(nss))
		for i, ns := range nss {
			parts[i] = f(ns)
		}
		return strings.Join(parts, ";")
	}
	switch cmd {
	case "node":
		return s.nodeName
	case "build":
		return serverBuild
	case "version":
		return "Aerospike Community Edition build " + serverBuild
	case "edition":
		return "Aerospike Community Edition"
	case "cluster-name":
		if s.opts.ClusterName != "" {
			return s.opts.ClusterName
		}
		return "null"
	case "features":
		return "batch-any;batch-index;blob-bits;cdt-list;cdt-map;cluster-stable;float;geo;" +
			"sindex-exists;peers;pipelining;pscans;query-show;relaxed-sc;replicas;replicas-all;" +
			"replicas-master;replicas-max;truncate-namespace;udf"
	case "partition-generation", "peers-generation", "cluster-generation":
		return "0"
	case "partitions":
		return strconv.Itoa(partitionCount)
	case "peers-clear-std", "peers-clear-alt", "peers-tls-std", "peers-tls-alt":
		return "0," + port + ",[]"
	case "service", "service-clear-std", "service-clear-alt":
		return "127.0.0.1:" + port
	case "service-tls-std", "service-tls-alt", "services", "services-alumni", "services-alternate":
		return ""
	case "namespaces":
		return strings.Join(nss, ";")
	case "replicas":
		return perNS(func(ns string) string { return ns + ":0,1," + allPartitionsBitmap })
	case "replicas-all":
		return perNS(func(ns string) string { return ns + ":1," + allPartitionsBitmap })
	case "replicas-master":
		return perNS(func(ns string) string { return ns + ":" + allPartitionsBitmap })
	case "rack-ids":
		return perNS(func(ns string) string { return ns + ":0" })
	case "user-agent-set":
		return "ok"
	case "truncate", "truncate-namespace":
		return s.infoTruncate(params)
	case "statistics":
		return "cluster_size=1;client_connections=" + strconv.FormatInt(s.stConns.Load(), 10)
	}
	s.log.Warn("aerotest: unsupported info command", "name", name)
	return "ERROR:4:unrecognized command"
}

// infoTruncate implements "truncate:namespace=NS;set=SET[;lut=NANOS]" and
// "truncate-namespace:namespace=NS[;lut=NANOS]": records last updated
// before lut (default now) are removed.
func (s *Server) infoTruncate(params string) string {
	kv := map[string]string{}
	for _, p := range strings.Split(params, ";") {
		k, v, _ := strings.Cut(p, "=")
		kv[k] = v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.namespaces[kv["namespace"]]
	if ns == nil {
		return "ERROR:20:namespace not found"
	}
	cutoff := s.now().UnixNano()
	if l, ok := kv["lut"]; ok && l != "" && l != "now" {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			return "ERROR:4:bad lut"
		}
		cutoff = n
	}
	set, hasSet := kv["set"]
	for d, r := range ns.records {
		if hasSet && r.set != set {
			continue
		}
		if r.lastUpdate.UnixNano() <= cutoff {
			delete(ns.records, d)
		}
	}
	return "ok"
}
