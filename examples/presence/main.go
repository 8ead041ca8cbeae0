// Command presence serves Live Mesh's presence service; see package
// github.com/leasehold/leasehold/examples/presence/presence.
//
//	presence --listen ADDR (--certs-dir DIR | --insecure) [--manager ADDR[,ADDR...]] [--namespace NS] [--id ID] [--advertise ADDR] [--ttl D]
//
// It serves until SIGINT or SIGTERM, then hands its ranges back (the
// devices republish to the new Owners). Heartbeat and query with the
// package's Client, or over HTTP:
//
//	curl -X PUT --data online 'http://ADDR/presence/alice/phone?seq=1'   # ADDR: leasehold lookup alice
//	curl 'http://ADDR/presence/alice'
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/examples/presence/presence"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := presence.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
