package archtest

import (
	"bufio"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A layer is a set of packages that may be imported by the same layers. The rules are
// written out in docs/ARCHITECTURE.md ("Rules").
type layer string

const (
	vocabulary  layer = "vocabulary (root package dcsync)"
	contract    layer = "contract (driver)"
	telemetry   layer = "shared library telemetry"
	layoutLib   layer = "shared library layout"
	keyNames    layer = "shared library internal/keyname (the primitives' key-name format)"
	secureLib   layer = "shared library internal/secure (credentials and TLS of store URLs)"
	wire        layer = "HBase wire client (internal/hbaserpc)"
	store       layer = "store (store/...)"
	frontEnd    layer = "front end (lock, latch, queue, election, semaphore, rwlock)"
	opener      layer = "store opener (storeurl)"
	operations  layer = "operator tools (internal/exporter, internal/primlist)"
	command     layer = "command (cmd/...)"
	testSupport layer = "test support (conformance suites, internal test harnesses)"
)

// testHarnesses are the internal packages that exist for tests only (besides the
// suites, which are recognised by their name ending in "test").
var testHarnesses = []string{
	"internal/chaos",
	"internal/faultproxy",
	"internal/javaclients",
	"internal/queuebench",
	"internal/clusterprobe",
	"internal/benchratio",
}

// layerOf puts a package, named by its path inside the module ("" for the root), in
// its layer; ok is false for a package no rule places.
func layerOf(rel string) (l layer, ok bool) {
	first, _, _ := strings.Cut(rel, "/")
	switch {
	case rel == "":
		return vocabulary, true
	case rel == "driver":
		return contract, true
	case rel == "telemetry":
		return telemetry, true
	case rel == "layout":
		return layoutLib, true
	case rel == "internal/keyname":
		return keyNames, true
	case rel == "internal/secure":
		return secureLib, true
	case rel == "internal/hbaserpc" || strings.HasPrefix(rel, "internal/hbaserpc/"):
		return wire, true
	case strings.HasSuffix(path.Base(rel), "test") || slices.Contains(testHarnesses, rel):
		return testSupport, true
	case slices.Contains(frontEnds, first):
		return frontEnd, true
	case first == "store" && rel != "store":
		return store, true
	case rel == "storeurl":
		return opener, true
	case rel == "internal/exporter" || rel == "internal/primlist":
		return operations, true
	case first == "cmd":
		return command, true
	}
	return "", false
}

// frontEnds are the primitives' packages: the user's API over the store contract.
var frontEnds = []string{"lock", "latch", "queue", "election", "semaphore", "rwlock"}

// allowed lists, for each layer, the layers its non-test code may import. A layer
// absent from its own list may not import its own other packages either.
var allowed = map[layer][]layer{
	vocabulary:  {},
	contract:    {vocabulary},
	telemetry:   {vocabulary, contract},
	layoutLib:   {vocabulary, contract},
	secureLib:   {vocabulary, contract},
	wire:        {vocabulary, contract, secureLib, wire},
	store:       {vocabulary, contract, layoutLib, secureLib, telemetry, wire, store},
	keyNames:    {},
	frontEnd:    {vocabulary, contract, telemetry, keyNames, frontEnd},
	opener:      {vocabulary, contract, secureLib, store},
	operations:  {vocabulary, contract, telemetry, keyNames, frontEnd, operations},
	command:     {vocabulary, contract, telemetry, layoutLib, keyNames, secureLib, frontEnd, opener, operations},
	testSupport: {vocabulary, contract, telemetry, layoutLib, keyNames, secureLib, wire, frontEnd, testSupport},
}

// testsChecked are the layers whose test files are held to their layer's rules as well
// (test support included: they may not import it): the bottom of the graph, which must stay usable, and
// testable, on its own. Every other package's tests may import any package of the
// module: a test is a user of its package (a store's tests run the conformance suite,
// which drives lock, latch and queue on the store), and tests are linked into no program.
var testsChecked = []layer{vocabulary, contract, wire}

// imp is one import of a module package by one file.
type imp struct {
	from, to string // package paths inside the module ("" for the root)
	file     string // the importing file, relative to the module root
	test     bool   // the file is a _test.go file
}

// check returns one message per import that breaks a rule, and one per package that no
// rule places.
func check(imps []imp, pkgs []string) []string {
	var bad []string
	for _, p := range pkgs {
		if _, ok := layerOf(p); !ok {
			bad = append(bad, fmt.Sprintf("package %s is in no layer: place it in layerOf (internal/archtest) and in docs/ARCHITECTURE.md", name(p)))
		}
	}
	for _, i := range imps {
		if msg := checkOne(i); msg != "" {
			bad = append(bad, fmt.Sprintf("%s imports %s: %s", i.file, name(i.to), msg))
		}
	}
	return bad
}

// checkOne returns why the import i breaks a rule, or "".
func checkOne(i imp) string {
	from, ok1 := layerOf(i.from)
	to, ok2 := layerOf(i.to)
	if !ok1 || !ok2 || i.from == i.to {
		return "" // unplaced packages are reported once by check; a package's own external tests import it
	}
	if (i.to == "internal/hbaserpc/pb" || strings.HasPrefix(i.to, "internal/hbaserpc/pb/")) && from != wire {
		return "only internal/hbaserpc may import its generated protobuf messages"
	}
	if i.test && !slices.Contains(testsChecked, from) {
		return ""
	}
	ok := slices.Contains(allowed[from], to)
	if !ok {
		what := "non-test code"
		if i.test {
			what = "a test"
		}
		return fmt.Sprintf("%s of %s [%s] may not import %s [%s] (docs/ARCHITECTURE.md, Rules)", what, name(i.from), from, name(i.to), to)
	}
	// Finer rules within allowed layers.
	switch {
	case from == store && to == store && storeName(i.from) != storeName(i.to):
		return fmt.Sprintf("store %s may not import another store, %s: a store stands alone on the contract", name(i.from), name(i.to))
	case from == store && to == wire && storeName(i.from) != "store/hbase":
		return fmt.Sprintf("only store/hbase may use the HBase wire client, not %s", name(i.from))
	}
	return ""
}

// storeName is the store a package under store/ belongs to: store/X.
func storeName(rel string) string {
	parts := strings.SplitN(rel, "/", 3)
	return strings.Join(parts[:min(2, len(parts))], "/")
}

// name prints a package path inside the module.
func name(rel string) string {
	if rel == "" {
		return "the root package dcsync"
	}
	return rel
}

// moduleRoot finds the directory of the module's go.mod above the working directory
// and the module path it declares.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					mod, err := strconv.Unquote(strings.TrimSpace(rest))
					if err != nil {
						mod = strings.TrimSpace(rest)
					}
					return dir, mod
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = up
	}
}

// readGraph parses the imports of every .go file of the module (all of them, whatever
// their build constraints: a rule holds on every platform) and returns the imports of
// module packages and every package directory found.
func readGraph(t *testing.T) ([]imp, []string) {
	t.Helper()
	root, module := moduleRoot(t)
	var imps []imp
	pkgs := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := d.Name()
			if p != root && (base == "testdata" || base == "vendor" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); p != root && err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		relFile, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		relFile = filepath.ToSlash(relFile)
		pkg := path.Dir(relFile)
		if pkg == "." {
			pkg = ""
		}
		pkgs[pkg] = true
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, spec := range f.Imports {
			ip, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: %w", relFile, err)
			}
			var to string
			switch {
			case ip == module:
				to = ""
			case strings.HasPrefix(ip, module+"/"):
				to = strings.TrimPrefix(ip, module+"/")
			default:
				continue
			}
			imps = append(imps, imp{from: pkg, to: to, file: relFile, test: strings.HasSuffix(relFile, "_test.go")})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var list []string
	for p := range pkgs {
		list = append(list, p)
	}
	sort.Strings(list)
	return imps, list
}

// TestImportDirection fails for every import of the module that points the wrong way
// (a store importing a front end, the contract importing a store, non-test code
// importing a test harness, ...) and for every package no rule places.
func TestImportDirection(t *testing.T) {
	imps, pkgs := readGraph(t)
	// Guard against a vacuous pass (a walk that found nothing of the module).
	for _, want := range []string{"", "driver", "lock", "latch", "queue", "storeurl", "store/memory", "cmd/dcsync"} {
		if !slices.Contains(pkgs, want) {
			t.Fatalf("the walk of the module found no package %s; found %q", name(want), pkgs)
		}
	}
	if len(imps) < 50 {
		t.Fatalf("only %d imports of module packages found; the walk is broken", len(imps))
	}
	for _, msg := range check(imps, pkgs) {
		t.Error(msg)
	}
}

// TestCheckCatchesUpwardImports feeds the checker one import that breaks each rule of
// docs/ARCHITECTURE.md, and some that keep them, so that a rule dropped from the
// checker fails here even while the real graph keeps it.
func TestCheckCatchesUpwardImports(t *testing.T) {
	bad := []imp{
		{from: "store/memory", to: "lock"},
		{from: "store/sqlite", to: "queue"},
		{from: "store/hbase", to: "storeurl"},
		{from: "store/aerospike", to: "cmd/dcsync"},
		{from: "store/sqlite", to: "store/memory"},
		{from: "store/sqlite", to: "internal/hbaserpc"},
		{from: "driver", to: "layout"},
		{from: "driver", to: "store/memory"},
		{from: "driver", to: "lock"},
		{from: "", to: "driver"},
		{from: "", to: "lock"},
		{from: "lock", to: "store/memory"},
		{from: "queue", to: "storeurl"},
		{from: "latch", to: "layout"},
		{from: "internal/hbaserpc", to: "lock"},
		{from: "internal/hbaserpc", to: "store/hbase"},
		{from: "layout", to: "store/hbase"},
		{from: "telemetry", to: "lock"},
		{from: "storeurl", to: "lock"},
		{from: "store/memory", to: "internal/chaos"},
		{from: "lock", to: "internal/faultproxy"},
		{from: "cmd/dcsync", to: "internal/chaos"},
		{from: "storeurl", to: "driver/drivertest"},
		{from: "driver/drivertest", to: "store/memory"},
		{from: "internal/chaos", to: "storeurl"},
		{from: "cmd/dcsync", to: "internal/hbaserpc"},
		{from: "store/hbase", to: "internal/hbaserpc/pb"},
		{from: "store/hbase", to: "internal/hbaserpc/pb", test: true},
		{from: "internal/hbaserpc", to: "lock", test: true},
		{from: "driver", to: "store/memory", test: true},
		{from: "", to: "lock", test: true},
		{from: "cmd/dcsync", to: "store/memory"},
		{from: "", to: "internal/queuebench", test: true},
		{from: "driver", to: "driver/drivertest", test: true},
	}
	for _, i := range bad {
		i.file = name(i.from) + "/x.go"
		if i.test {
			i.file = name(i.from) + "/x_test.go"
		}
		msgs := check([]imp{i}, nil)
		if len(msgs) != 1 || !strings.Contains(msgs[0], "imports "+name(i.to)+":") {
			t.Errorf("%s importing %s: got %q, want one message naming the import", i.file, name(i.to), msgs)
		}
	}
	good := []imp{
		{from: "store/hbase", to: "internal/hbaserpc"},
		{from: "store/hbase", to: "layout"},
		{from: "store/aerospike", to: "driver"},
		{from: "queue", to: "lock"},
		{from: "lock", to: "telemetry"},
		{from: "storeurl", to: "store/sqlite"},
		{from: "cmd/dcsync", to: "storeurl"},
		{from: "internal/faultproxy", to: "internal/hbaserpc"},
		{from: "internal/hbaserpc", to: "internal/hbaserpc/pb"},
		{from: "internal/hbaserpc", to: "internal/hbaserpc/pb", test: true},
		{from: "driver/drivertest", to: "lock"},
		{from: "store/memory", to: "driver/drivertest", test: true},
		{from: "store/hbase", to: "internal/chaos", test: true},
		{from: "lock", to: "store/memory", test: true},
		{from: "cmd/dcsync", to: "internal/hbaserpc", test: true},
	}
	for _, i := range good {
		i.file = name(i.from) + "/x.go"
		if msgs := check([]imp{i}, nil); len(msgs) != 0 {
			t.Errorf("%s importing %s (test %v): got %q, want no message", name(i.from), name(i.to), i.test, msgs)
		}
	}
	if msgs := check(nil, []string{"newthing"}); len(msgs) != 1 || !strings.Contains(msgs[0], "newthing is in no layer") {
		t.Errorf("an unplaced package: got %q", msgs)
	}
}
