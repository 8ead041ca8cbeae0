// Package peers holds baselines that compare leasehold with the tools teams
// use in its place: consistent-hash routing libraries (routing_test.go, run
// with `go test -bench Routing -benchmem`) and an etcd lease/watch sharding
// setup (cmd/etcdcompare). It is a separate module so that the main module
// does not depend on etcd. See docs/peers.md.
package peers
