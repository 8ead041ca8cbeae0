package proto

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// generated lists the files generate.go produces, relative to this directory.
var generated = []string{
	"leasehold/v1/agent.pb.go",
	"leasehold/v1/agent_grpc.pb.go",
	"leasehold/v1/leasehold.pb.go",
	"leasehold/v1/leasehold_grpc.pb.go",
}

// TestGeneratedUpToDate fails when the committed generated code differs from
// what the go:generate line in generate.go produces now: someone edited
// leasehold.proto (or a generated file) without running make proto.
//
// It skips when protoc or a plugin is missing, or when an installed version
// differs from the one that generated the committed files (another version
// writes different bytes without anything being stale).
func TestGeneratedUpToDate(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc not found; install Debian's protobuf-compiler to check the generated code")
	}
	plugins := map[string]string{} // name -> path
	for _, name := range []string{"protoc-gen-go", "protoc-gen-go-grpc"} {
		path, ok := findPlugin(t, name)
		if !ok {
			t.Skipf("%s not found on $PATH or in $(go env GOPATH)/bin; run make proto to install it", name)
		}
		plugins[name] = path
	}

	// The versions the committed files were generated with, from their headers.
	want := map[string]string{}
	for _, f := range generated {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range versionLine.FindAllSubmatch(b, -1) {
			want[string(m[1])] = string(m[2])
		}
	}
	have := map[string]string{
		"protoc":             toolVersion(t, protoc),
		"protoc-gen-go":      toolVersion(t, plugins["protoc-gen-go"]),
		"protoc-gen-go-grpc": toolVersion(t, plugins["protoc-gen-go-grpc"]),
	}
	for tool, v := range have {
		if want[tool] == "" {
			t.Fatalf("the generated files name no %s version; their headers changed shape", tool)
		}
		if v != want[tool] {
			t.Skipf("installed %s is %s but the committed code was generated with %s; install that version "+
				"to check the generated code (make proto installs the pinned plugins; protoc is Debian's protobuf-compiler)",
				tool, v, want[tool])
		}
	}

	// The same protoc call as generate.go's go:generate line, into a temporary
	// directory.
	out := t.TempDir()
	cmd := exec.Command(protoc,
		"--plugin=protoc-gen-go="+plugins["protoc-gen-go"],
		"--plugin=protoc-gen-go-grpc="+plugins["protoc-gen-go-grpc"],
		"-I", ".",
		"--go_out="+out, "--go_opt=paths=source_relative",
		"--go-grpc_out="+out, "--go-grpc_opt=paths=source_relative",
		"leasehold/v1/leasehold.proto", "leasehold/v1/agent.proto")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, b)
	}

	var fresh []string
	err = filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(out, path)
			fresh = append(fresh, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(fresh, " ") != strings.Join(generated, " ") {
		t.Fatalf("protoc generated %q; this test expects %q", fresh, generated)
	}
	for _, f := range generated {
		committed, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		regenerated, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(committed, regenerated) {
			t.Errorf("proto/%s is stale: it differs from what its .proto generates now; run make proto", f)
		}
	}
}

// versionLine matches the tool versions in a generated file's header:
//
//	// 	protoc-gen-go v1.36.12
//	// - protoc-gen-go-grpc v1.6.2
var versionLine = regexp.MustCompile(`(?m)^//\s+(?:- )?(protoc(?:-gen-go(?:-grpc)?)?)\s+(v\S+)$`)

// findPlugin looks for a protoc plugin on $PATH, then where go install puts
// it.
func findPlugin(t *testing.T, name string) (string, bool) {
	if path, err := exec.LookPath(name); err == nil {
		return path, true
	}
	for _, v := range []string{"GOBIN", "GOPATH"} {
		b, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Logf("go env %s: %v", v, err)
			continue
		}
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(b))) {
			if dir == "" {
				continue
			}
			if v == "GOPATH" {
				dir = filepath.Join(dir, "bin")
			}
			path := filepath.Join(dir, name)
			if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
				return path, true
			}
		}
	}
	return "", false
}

// toolVersion returns the version a tool prints for --version in the form the
// generated headers use: "libprotoc 3.21.12" → "v3.21.12",
// "protoc-gen-go-grpc 1.6.2" → "v1.6.2".
func toolVersion(t *testing.T, path string) string {
	b, err := exec.Command(path, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", path, err)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		t.Fatalf("%s --version printed nothing", path)
	}
	v := fields[len(fields)-1]
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return v
}
