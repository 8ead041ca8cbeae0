// Command mail serves Porcupine's mail service (package mail; see README).
//
//	mail --id ID --listen ADDR --data-dir DIR --nodes ID=ADDR,... (--certs-dir DIR | --insecure) [--manager ADDR[,ADDR...]] [--namespace NS]
//
// --nodes names every node, this one included. It serves until SIGINT or
// SIGTERM, then hands its ranges back; its fragments stay in --data-dir.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/examples/mail/mail"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := mail.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
