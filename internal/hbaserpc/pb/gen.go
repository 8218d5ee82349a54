// Package pb holds Go types generated from a subset of HBase 2.6's protobuf
// definitions (the .proto files in this directory; field numbers match HBase's).
//
// The generated *.pb.go files are committed. To regenerate them, install protoc
// (Debian: apt-get install -y protobuf-compiler) and protoc-gen-go
// (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12), then run
// `go generate ./internal/hbaserpc/pb/` from the module root.
//
// The protobuf package is dcsync.hbasepb rather than HBase's hbase.pb (package
// names never travel on the wire) so as not to clash in the global registry. The
// subset was checked field by field (number, name, type, label) against the
// .proto files inside hbase-protocol-shaded-2.6.4.jar.
//
// It is internal because these are the wire messages of internal/hbaserpc and nothing
// else: only internal/hbaserpc may import it (internal/archtest enforces that).
package pb

//go:generate protoc -I. --go_out=. --go_opt=paths=source_relative Cell.proto Client.proto Comparator.proto ErrorHandling.proto Filter.proto HBase.proto Master.proto RPC.proto Tracing.proto ZooKeeper.proto
