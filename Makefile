# Developer tasks. CI does not use this file; see .ci/run.

# The code generators, pinned: the generated files record these versions, and
# proto/generate_test.go compares the committed files against fresh output
# only when the installed versions match them.
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2

# Where go install puts the plugins.
GOBIN := $(or $(shell go env GOBIN),$(shell go env GOPATH)/bin)

.PHONY: proto
# proto regenerates proto/leasehold/v1/*.pb.go from leasehold.proto. It needs
# protoc from Debian's protobuf-compiler (apt-get install -y protobuf-compiler).
proto:
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH="$(GOBIN):$$PATH" go generate ./proto
