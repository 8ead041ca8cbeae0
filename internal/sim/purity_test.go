package sim

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The simulation is only as good as the determinism of what it runs. This
// test reads the source of every deterministic core — the pure packages and
// the core*.go files of owner and lookup — and fails on anything
// that starts a goroutine, opens a socket, touches the OS, reads a clock or
// draws global randomness.

// internal/lease (the Manager's Core and State), internal/replica (its
// Raft node, state machine and Lookup feed) and internal/thinlookup (the
// thin Lookups' Core) are pure as a whole.
var purePackages = []string{"keyspace", "assign", "leasetable", "protocol", "rebalance", "internal/lease", "internal/replica", "internal/thinlookup"}
var corePackages = []string{"owner", "lookup"}

// pureFiles are other deterministic files the simulation runs.
var pureFiles = []string{}

var forbiddenImports = map[string]string{
	"net": "sockets", "net/http": "sockets", "google.golang.org/grpc": "sockets",
	"os": "the OS", "os/exec": "the OS", "syscall": "the OS", "io/ioutil": "the OS",
	"sync": "concurrency", "sync/atomic": "concurrency",
	"math/rand": "global randomness", "crypto/rand": "global randomness",
	"log": "global output", "log/slog": "global output",
}

// clockFuncs read or wait on the wall clock.
var clockFuncs = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true,
}

func coreFiles(t *testing.T) []string {
	root := filepath.Join("..", "..")
	var files []string
	for _, p := range purePackages {
		m, _ := filepath.Glob(filepath.Join(root, p, "*.go"))
		files = append(files, m...)
	}
	for _, p := range corePackages {
		m, _ := filepath.Glob(filepath.Join(root, p, "core*.go"))
		if len(m) == 0 {
			t.Fatalf("no core*.go files in %s", p)
		}
		files = append(files, m...)
	}
	for _, f := range pureFiles {
		files = append(files, filepath.Join(root, f))
	}
	var out []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			out = append(out, f)
		}
	}
	return out
}

func TestCoresArePure(t *testing.T) {
	files := coreFiles(t)
	if len(files) < 10 {
		t.Fatalf("found only %d core files; is the layout still as this test expects?", len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		problems, err := impurities(f, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
}

// impurities lists what in a Go source file breaks determinism.
func impurities(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var problems []string
	report := func(pos token.Pos, format string, args ...any) {
		problems = append(problems, fset.Position(pos).String()+": "+fmt.Sprintf(format, args...))
	}
	local := map[string]string{} // import path -> local name
	for _, imp := range file.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if why, bad := forbiddenImports[path]; bad {
			report(imp.Pos(), "imports %s (%s)", path, why)
		}
		name := filepath.Base(path)
		if path == "math/rand/v2" {
			name = "rand"
		}
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[path] = name
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			report(n.Pos(), "starts a goroutine")
		case *ast.SelectStmt:
			report(n.Pos(), "waits on channels")
		case *ast.SendStmt:
			report(n.Pos(), "sends on a channel")
		case *ast.SelectorExpr:
			id, ok := n.X.(*ast.Ident)
			if !ok {
				break
			}
			if tp, ok := local["time"]; ok && id.Name == tp && clockFuncs[n.Sel.Name] {
				report(n.Pos(), "reads the wall clock: time.%s", n.Sel.Name)
			}
			if rp, ok := local["math/rand/v2"]; ok && id.Name == rp && !seededRand[n.Sel.Name] {
				report(n.Pos(), "draws global randomness: rand.%s", n.Sel.Name)
			}
		}
		return true
	})
	return problems, nil
}

// seededRand are the math/rand/v2 names that build a seeded source.
var seededRand = map[string]bool{"New": true, "NewPCG": true, "Rand": true, "PCG": true}

// TestPurityCheckCatches proves the check can fail.
func TestPurityCheckCatches(t *testing.T) {
	src := []byte(`package x
import ("time"; "math/rand/v2"; "net")
func f() { go func(){}(); _ = time.Now(); _ = rand.IntN(3); var c chan int; c <- 1; _ = net.IPv4len }
`)
	got, err := impurities("bad.go", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"imports net", "starts a goroutine", "time.Now", "rand.IntN", "sends on a channel"} {
		found := false
		for _, p := range got {
			if strings.Contains(p, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("purity check missed %q; it reported %q", want, got)
		}
	}
}
