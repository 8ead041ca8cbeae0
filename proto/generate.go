// Package proto holds leasehold's protobuf and gRPC definitions. The wire
// protocol is leasehold/v1/leasehold.proto; the Go code generated from it,
// package leaseholdv1, is committed next to it. internal/wire converts its
// messages to and from the Go types of package protocol. The agent's local
// API, leasehold/v1/agent.proto (docs/agent.md), is generated into the same
// package.
//
// To regenerate after editing the .proto file, run
//
//	make proto
//
// which installs the pinned protoc-gen-go and protoc-gen-go-grpc and then runs
// the go:generate line below. That line needs protoc (Debian's
// protobuf-compiler package: apt-get install -y protobuf-compiler) and both
// plugins on $PATH. generate_test.go fails when the committed files differ
// from what this command produces.
package proto

//go:generate protoc -I . --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative leasehold/v1/leasehold.proto leasehold/v1/agent.proto
