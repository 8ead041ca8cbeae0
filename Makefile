# Developer tasks. CI does not use this file; see .ci/run.

# The code generators, pinned: the generated files record these versions, and
# proto/generate_test.go compares the committed files against fresh output
# only when the installed versions match them.
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2

# Where go install puts the plugins.
GOBIN := $(or $(shell go env GOBIN),$(shell go env GOPATH)/bin)

.PHONY: proto image chart-test rehearse deploy-test
# proto regenerates proto/leasehold/v1/*.pb.go from leasehold.proto. It needs
# protoc from Debian's protobuf-compiler (apt-get install -y protobuf-compiler).
proto:
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH="$(GOBIN):$$PATH" go generate ./proto

# The deployment (deploy/: the image, the Helm chart, the rehearsal) is a Go
# module of its own, so that the helm library, k8s.io/api and
# go-containerregistry stay out of the main module's build and tests.

# image builds the OCI image without a Docker engine into dist/image (an OCI
# layout, and leasehold.tar for docker load). VERSION sets the version.
VERSION ?= devel
image:
	cd deploy && go run ./cmd/leasehold-image -out ../dist/image -version $(VERSION)

# chart-test lints and renders the chart and checks its invariants.
chart-test:
	cd deploy && go test -count=1 ./chart

# rehearse runs what the chart describes as local processes: a rolling
# restart, a reschedule and a scale-up under a kv load (docs/deploy.md).
rehearse:
	cd deploy && go test -count=1 -timeout 15m -v -run TestRehearsal ./rehearse

# deploy-test is what CI runs of the deployment module.
deploy-test:
	cd deploy && go vet ./... && go test -count=1 -timeout 30m ./...
