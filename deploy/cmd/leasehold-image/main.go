// Command leasehold-image builds the leasehold OCI image without a Docker
// engine (package image) and writes it as an OCI image layout and a
// tarball for docker load:
//
//	cd deploy && go run ./cmd/leasehold-image -out ../dist/image -version v0.1.0
//	docker load -i ../dist/image/leasehold.tar            # with Docker
//	skopeo copy oci:../dist/image docker://REGISTRY/leasehold:v0.1.0   # without
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/leasehold/leasehold/deploy/image"
)

func main() {
	out := flag.String("out", "dist/image", "write the OCI layout and leasehold.tar into `DIR`")
	version := flag.String("version", "devel", "the version the binaries print (leasehold --version) and the image's tag")
	arch := flag.String("arch", "", "the GOARCH to build for (default: this machine's)")
	repo := flag.String("repository", image.Repository, "the image's name")
	flag.Parse()
	img, err := image.Build(context.Background(), *version, *arch)
	if err == nil {
		err = image.Write(img, *out, *repo+":"+*version)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasehold-image:", err)
		os.Exit(1)
	}
	d, _ := img.Digest()
	fmt.Printf("%s:%s %s in %s\n", *repo, *version, d, *out)
}
