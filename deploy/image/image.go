// Package image builds the leasehold OCI image without a Docker engine:
// the static leasehold and kv binaries, built by go build, in one layer on
// an empty base (no shell, no package manager, no libc), run as a non-root
// user, written as an OCI image layout and as a tarball docker load
// accepts. deploy/Dockerfile builds the same image with Docker; this
// package's test keeps the two equal.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image is; deploy/Dockerfile says the same (TestDockerfileIsEquivalent).
const (
	// UID and GID the processes run as: not root, and no user of the host.
	UID = 65532
	GID = 65532
	// User is the image's USER.
	User = "65532:65532"
	// Entrypoint is the leasehold binary; the chart's kv example runs
	// /usr/local/bin/kv with command:.
	Entrypoint = "/usr/local/bin/leasehold"
	// DataDir is the Manager's data directory in the chart, owned by User.
	DataDir = "/var/lib/leasehold"
	// Repository is the image's default name.
	Repository = "ghcr.io/leasehold/leasehold"
)

// Ports the image exposes: the Manager's gRPC and metrics, the gateway's,
// the kv example's.
var Ports = []string{"7400/tcp", "7490/tcp", "8080/tcp", "9400/tcp"}

// Binary is a program of the image.
type Binary struct {
	Package string // relative to the repository's root
	Path    string // in the image
}

// Binaries are the image's programs.
var Binaries = []Binary{
	{Package: "./cmd/leasehold", Path: "/usr/local/bin/leasehold"},
	{Package: "./examples/kv", Path: "/usr/local/bin/kv"},
}

// BuildFlags are go build's flags for every binary, with VERSION replaced:
// a static binary (CGO_ENABLED=0), no paths of the build machine, no
// symbol table.
var BuildFlags = []string{"-trimpath", "-ldflags=-s -w -X main.version=VERSION"}

// Passwd and Group name the user, for tools that look it up.
const (
	Passwd = "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	Group  = "nonroot:x:65532:\n"
)

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build builds the binaries for linux/GOARCH (goarch "" is the host's) and
// returns the image.
func Build(ctx context.Context, version, goarch string) (v1.Image, error) {
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	tmp, err := os.MkdirTemp("", "leasehold-image")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	files := map[string]string{}
	for _, b := range Binaries {
		out := filepath.Join(tmp, filepath.Base(b.Path))
		args := []string{"build", "-o", out}
		for _, f := range BuildFlags {
			args = append(args, strings.ReplaceAll(f, "VERSION", version))
		}
		cmd := exec.CommandContext(ctx, "go", append(args, b.Package)...)
		cmd.Dir = Root()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOFLAGS=-buildvcs=false")
		if o, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", b.Package, err, o)
		}
		files[b.Path] = out
	}
	layer, err := rootfs(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goarch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = []string{Entrypoint}
	cf.Config.Cmd = []string{"--help"}
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin"}
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range Ports {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "leasehold",
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.source":  "https://github.com/leasehold/leasehold",
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the image's one layer: the binaries, the user's entries, and
// the directories it writes, owned by it. Times are zero, so the same
// binaries make the same layer.
func rootfs(files map[string]string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: epoch})
	}
	file := func(name string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, d := range []string{"etc", "usr", "usr/local", "usr/local/bin", "var", "var/lib"} {
		if err := dir(d, 0o755, 0); err != nil {
			return nil, err
		}
	}
	if err := dir("tmp", 0o1777, 0); err != nil {
		return nil, err
	}
	if err := dir(strings.TrimPrefix(DataDir, "/"), 0o700, UID); err != nil {
		return nil, err
	}
	if err := file("etc/passwd", 0o644, []byte(Passwd)); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte(Group)); err != nil {
		return nil, err
	}
	for _, b := range Binaries {
		data, err := os.ReadFile(files[b.Path])
		if err != nil {
			return nil, err
		}
		if err := file(strings.TrimPrefix(b.Path, "/"), 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Write writes img as an OCI image layout in dir (skopeo, crane, podman,
// containerd's ctr import it) and as dir/leasehold.tar for docker load,
// tagged ref.
func Write(img v1.Image, dir, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag.String()})); err != nil {
		return err
	}
	return tarball.WriteToFile(filepath.Join(dir, "leasehold.tar"), tag, img)
}

// Extract unpacks img's filesystem into dir (the tests run what it holds).
func Extract(img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
}
