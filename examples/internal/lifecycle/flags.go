package lifecycle

import (
	"cmp"
	"errors"
	"flag"
	"os"
)

// ManagerFlags defines the flags every example command takes to find its
// Manager: --manager (default $LEASEHOLD_MANAGER, else 127.0.0.1:7400) and
// --namespace, into manager and namespace.
func ManagerFlags(fs *flag.FlagSet, manager, namespace *string) {
	fs.StringVar(manager, "manager", cmp.Or(os.Getenv("LEASEHOLD_MANAGER"), "127.0.0.1:7400"),
		"the Manager's address, host:port, or a comma-separated list of its replicas' addresses, whose leader is followed ($LEASEHOLD_MANAGER sets the default)")
	fs.StringVar(namespace, "namespace", "", `the namespace (empty: "default")`)
}

// ParseExit is a command's exit code after its flags failed to parse with
// err: 0 when help was asked for (the flag package has printed it), 2 for
// a usage error.
func ParseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
