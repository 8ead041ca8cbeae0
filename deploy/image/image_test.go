package image

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImageRuns builds the image as make image does (no Docker engine),
// writes it, reads it back from both the OCI layout and the docker load
// tarball, unpacks its filesystem and runs its entrypoint: --version
// prints the version it was built with, --help the subcommands; the kv
// binary answers too. The configuration runs as the non-root user, with
// the ports and the entrypoint the chart expects.
func TestImageRuns(t *testing.T) {
	img, err := Build(context.Background(), "v0.0.0-test", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := Write(img, dir, Repository+":v0.0.0-test"); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("the layout's index: %v, %v", m, err)
	}
	want, _ := img.Digest()
	if m.Manifests[0].Digest != want {
		t.Errorf("the layout holds %s, want %s", m.Manifests[0].Digest, want)
	}
	if _, err := tarball.ImageFromPath(filepath.Join(dir, "leasehold.tar"), nil); err != nil {
		t.Errorf("the tarball: %v", err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != User || strings.HasPrefix(c.User, "0") || c.User == "root" {
		t.Errorf("USER %q", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{Entrypoint}) {
		t.Errorf("ENTRYPOINT %v", c.Entrypoint)
	}
	for _, p := range Ports {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed", p)
		}
	}

	root := t.TempDir()
	if err := Extract(img, root); err != nil {
		t.Fatal(err)
	}
	run := func(bin string, args ...string) string {
		out, err := exec.Command(filepath.Join(root, bin), args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s %v: %v\n%s", bin, args, err, out)
		}
		return string(out)
	}
	if out := run(c.Entrypoint[0], "--version"); !strings.Contains(out, "v0.0.0-test") {
		t.Errorf("--version: %q", out)
	}
	if out := run(c.Entrypoint[0], "--help"); !strings.Contains(out, "manager") || !strings.Contains(out, "gateway") {
		t.Errorf("--help: %q", out)
	}
	if out := run("/usr/local/bin/kv", "--help"); !strings.Contains(out, "kv serve") {
		t.Errorf("kv --help: %q", out)
	}
	// Static: no interpreter to find in an image without libc.
	if out, err := exec.Command("file", filepath.Join(root, Entrypoint)).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
		t.Errorf("the binary is not static: %s", out)
	}
}

// TestDockerfileIsEquivalent: deploy/Dockerfile builds the same binaries
// with the same flags, and its image has the same user, ports, entrypoint
// and user entries.
func TestDockerfileIsEquivalent(t *testing.T) {
	f, err := os.Open(filepath.Join(Root(), "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	text := strings.Join(lines, "\n")
	build := regexp.MustCompile(`(?m)^RUN go build -o /out(\S+) (.*) (\./\S+)$`)
	found := build.FindAllStringSubmatch(text, -1)
	if len(found) != len(Binaries) {
		t.Fatalf("the Dockerfile builds %d binaries, the image %d", len(found), len(Binaries))
	}
	for i, b := range Binaries {
		path, flags, pkg := found[i][1], found[i][2], found[i][3]
		if path != b.Path || pkg != b.Package {
			t.Errorf("the Dockerfile builds %s into %s; the image %s into %s", pkg, path, b.Package, b.Path)
		}
		var want []string
		for _, fl := range BuildFlags {
			if strings.Contains(fl, " ") {
				fl = `"` + fl + `"`
			}
			want = append(want, strings.ReplaceAll(fl, "VERSION", "${VERSION}"))
		}
		if flags != strings.Join(want, " ") {
			t.Errorf("the Dockerfile builds %s with %s; the image with %s", pkg, flags, strings.Join(want, " "))
		}
	}
	for _, want := range []string{
		"ENV CGO_ENABLED=0 GOOS=linux GOFLAGS=-buildvcs=false",
		"FROM scratch",
		"USER " + User,
		"EXPOSE " + strings.Join(Ports, " "),
		`ENTRYPOINT ["` + Entrypoint + `"]`,
		"echo '" + strings.TrimSuffix(Passwd, "\n") + "' > /out/etc/passwd",
		"echo '" + strings.TrimSuffix(Group, "\n") + "' > /out/etc/group",
		"chown 65532:65532 /out" + DataDir,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the Dockerfile lacks %q", want)
		}
	}
}
