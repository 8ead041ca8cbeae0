// Command etcdserver runs a single-member embedded etcd (the server side of
// the etcd sharding baseline) and prints "etcd listening on ADDR".
//
//	go run ./cmd/etcdserver -dir /tmp/etcd-bench -listen 127.0.0.1:2379
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/bench/peers/internal/servers"
)

func main() {
	dir := flag.String("dir", "", "data directory (default: a new temporary directory)")
	listen := flag.String("listen", "127.0.0.1:2379", "client address; port 0 picks one")
	flag.Parse()
	if *dir == "" {
		d, err := os.MkdirTemp("", "etcdserver-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := servers.RunEtcd(ctx, *dir, *listen, "", func(addr string) {
		fmt.Printf("etcd listening on %s\n", addr)
	})
	if err != nil {
		log.Fatal(err)
	}
}
