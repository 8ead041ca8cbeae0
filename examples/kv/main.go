// Command kv is the soft-state hashtable of PRS Figure 4 (P§2.2) as a
// program: an in-memory key-value store partitioned by a leasehold Manager.
// See package github.com/leasehold/leasehold/examples/kv/kv.
//
//	kv serve --listen ADDR [--manager ADDR] [--namespace NS] [--id ID] [--advertise ADDR]
//	         [--capacity W] [--zone Z] [--standbys 0|1] [--drain-timeout D] [--dial-timeout D]
//	kv put   KEY VALUE [KEY VALUE]... [--manager ADDR] [--namespace NS] [--timeout D] [--dial-timeout D]
//	kv get   KEY [KEY]... [--manager ADDR] [--namespace NS] [--timeout D] [--dial-timeout D]
//
// Flags may come before or after the arguments, as with the leasehold
// command. --manager ADDR is host:port, or for a replicated Manager its
// replicas' addresses, comma-separated: the Owner and the Lookup follow the
// leader.
//
// serve runs a server until SIGINT or SIGTERM, then leaves gracefully: it
// drains, handing every range over to the other servers with its values
// (for at most --drain-timeout; a second signal cuts it short at once), and
// exits. A server that holds no range stops at once; one the Manager
// refuses (its certificate or namespace) says so and exits 1. put and get
// wait at most --dial-timeout for the first copy of the lease table, and
// otherwise say why the Manager could not be reached (the dial or TLS
// error); then they retry while ownership moves, for at most --timeout.
//
// put and get take several keys, one after the other over one connection
// to the Manager (a process per key spends most of its time starting and
// fetching the lease table). get with one key prints its value; with
// several, as grep names the file when given several, it prints KEY, a tab
// and the value for each key found, and "KEY: not found" on stderr for each
// key that has none. --timeout is the whole command's. A put that fails
// ends the command, naming its key.
//
// Exit codes, as the leasehold command's: 0 success; 1 a runtime failure
// (the Manager cannot be reached or refuses, no owner answered in time) or,
// for get, a key with no value ("not found" on stderr, after every key was
// read); 2 bad usage.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/examples/kv/kv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kv.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
