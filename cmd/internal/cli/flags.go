package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/protocol"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/client"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// choiceValue is a string flag that accepts one of a fixed set of values; a
// typo fails at parse time with the choices listed.
type choiceValue struct {
	value   *string
	choices []string
}

func newChoice(p *string, def string, choices ...string) *choiceValue {
	*p = def
	return &choiceValue{value: p, choices: choices}
}

func (c *choiceValue) String() string { return *c.value }
func (c *choiceValue) Type() string   { return strings.Join(c.choices, "|") }

func (c *choiceValue) Set(s string) error {
	for _, ch := range c.choices {
		if s == ch {
			*c.value = s
			return nil
		}
	}
	return fmt.Errorf("must be %s", orList(c.choices))
}

func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// managerUsage describes the --manager flag of every client subcommand.
const managerUsage = "dial the Manager at `ADDR`, host:port, or a comma-separated list of its replicas' addresses, whose leader is followed ($" + ManagerEnv + " sets the default)"

// clientOptions are the flags of every subcommand that talks to a Manager.
type clientOptions struct {
	manager   string        // host:port, or a comma-separated list
	namespace string        // the namespace to ask about
	json      bool          // machine-readable output
	timeout   time.Duration // how long to wait for the Manager
	trustOptions
}

func (o *clientOptions) addFlags(cmd *cobra.Command, e *env, namespaceUsage string) {
	f := cmd.Flags()
	f.StringVar(&o.manager, "manager", e.defaultManager(), managerUsage)
	f.StringVar(&o.namespace, "namespace", protocol.DefaultNamespace, namespaceUsage)
	f.BoolVar(&o.json, "json", false, "print JSON instead of text")
	f.DurationVar(&o.timeout, "timeout", 5*time.Second, "how long to wait for the Manager")
	o.addTrustFlags(f, e)
}

func (o *clientOptions) validate() error {
	switch {
	case o.manager == "":
		return usagef("--manager must not be empty")
	case o.namespace == "":
		return usagef("--namespace must not be empty")
	case o.timeout <= 0:
		return usagef("--timeout %s must be positive", o.timeout)
	}
	if _, err := client.SplitManagers(o.manager); err != nil {
		return usagef("--manager: %v", err)
	}
	_, err := o.dialOptions()
	return err
}

// status asks the Manager for its Status, within o.timeout. namespace ""
// asks for every namespace. With several addresses in --manager it asks
// each in turn, every replica answering Status, and returns the first
// answer; each gets an even share of the time left. Errors say whether the
// Manager could not be reached or refused.
func (o *clientOptions) status(ctx context.Context, namespace string) (*pb.StatusResponse, error) {
	addrs, err := client.SplitManagers(o.manager)
	if err != nil {
		return nil, usagef("--manager: %v", err)
	}
	if len(addrs) == 0 {
		return nil, usagef("--manager must not be empty")
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if len(addrs) == 1 {
		return o.statusAt(ctx, addrs[0], namespace)
	}
	var failed []string
	for i, addr := range addrs {
		deadline, _ := ctx.Deadline()
		share := time.Until(deadline) / time.Duration(len(addrs)-i)
		actx, acancel := context.WithTimeout(ctx, share)
		resp, err := o.statusAt(actx, addr, namespace)
		timedOut := actx.Err() == context.DeadlineExceeded
		acancel()
		switch {
		case err == nil:
			return resp, nil
		case ctx.Err() == context.Canceled:
			return nil, fmt.Errorf("interrupted while waiting for the manager at %s", o.manager)
		case !unreachableError(err):
			return nil, err
		case timedOut:
			failed = append(failed, fmt.Sprintf("%s: no answer within %s", addr, share.Round(time.Millisecond)))
		default:
			failed = append(failed, addr+": "+reachError(err))
		}
	}
	return nil, fmt.Errorf("cannot reach any manager at %s: %s", strings.Join(addrs, ", "), strings.Join(failed, "; "))
}

// statusAt asks the Manager replica at addr for its Status, within ctx.
func (o *clientOptions) statusAt(ctx context.Context, addr, namespace string) (*pb.StatusResponse, error) {
	conn, err := o.dial(addr)
	if err != nil {
		return nil, fmt.Errorf("--manager %q: %w", addr, err)
	}
	defer conn.Close()
	resp, err := pb.NewAdminClient(conn).Status(ctx, &pb.StatusRequest{Namespace: namespace})
	if err != nil {
		return nil, o.managerErrorAt(addr, err)
	}
	return resp, nil
}

// unreachable marks an error of a call to a Manager replica that was not
// reached or did not answer in time: another replica may answer.
type unreachable struct {
	cause string // what went wrong, for the message naming every replica
	err   error
}

func (u *unreachable) Error() string { return u.err.Error() }
func (u *unreachable) Unwrap() error { return u.err }

func unreachableError(err error) bool {
	var u *unreachable
	return errors.As(err, &u)
}

func reachError(err error) string {
	var u *unreachable
	if errors.As(err, &u) {
		return u.cause
	}
	return err.Error()
}

// managerError describes an error of a call to the Manager at --manager.
func (o *clientOptions) managerError(err error) error { return o.managerErrorAt(o.manager, err) }

// managerErrorAt describes an error of a call to the Manager at addr. An
// error that says it could not be reached or did not answer in time is
// *unreachable.
func (o *clientOptions) managerErrorAt(addr string, err error) error {
	var u *unreachable
	if errors.As(err, &u) {
		return err // described already
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			cause := fmt.Sprintf("no answer within %s", o.timeout)
			return &unreachable{cause, fmt.Errorf("cannot reach the manager at %s: %s", addr, cause)}
		}
		return fmt.Errorf("manager at %s: %w", addr, err)
	}
	msg := strings.TrimPrefix(st.Message(), "leasehold: ")
	switch st.Code() {
	case codes.Unavailable:
		// gRPC says `connection error: desc = "transport: Error while
		// dialing: dial tcp …: connect: connection refused"`; keep the end.
		if _, cause, ok := strings.Cut(msg, "Error while dialing: "); ok {
			msg = strings.TrimSuffix(cause, `"`)
		}
		if strings.Contains(msg, "server preface") && o.insecure {
			msg += " (the manager may serve TLS only: pass --certs-dir instead of --insecure)"
		}
		return &unreachable{msg, fmt.Errorf("cannot reach the manager at %s: %s", addr, msg)}
	case codes.DeadlineExceeded:
		cause := fmt.Sprintf("no answer within %s", o.timeout)
		return &unreachable{cause, fmt.Errorf("cannot reach the manager at %s: %s", addr, cause)}
	case codes.Canceled:
		return fmt.Errorf("interrupted while waiting for the manager at %s", addr)
	}
	return fmt.Errorf("manager at %s: %s", addr, msg)
}

// atLeader calls try on the Managers of --manager in turn, a refusal's
// leader hint first, until one answers; it returns the address that did.
// An error that final reports (a refusal that no replica would lift) ends
// the search at once.
func (o *clientOptions) atLeader(try func(addr string) (hint string, err error), final func(error) bool) (string, error) {
	if err := o.validate(); err != nil {
		return "", err
	}
	addrs, err := client.SplitManagers(o.manager)
	if err != nil {
		return "", usagef("--manager: %v", err)
	}
	tried := map[string]bool{}
	var last error
	for hops := 0; len(addrs) > 0 && hops < 8; hops++ {
		addr := addrs[0]
		addrs = addrs[1:]
		if tried[addr] {
			continue
		}
		tried[addr] = true
		hint, err := try(addr)
		switch {
		case err == nil:
			return addr, nil
		case hint != "":
			addrs = append([]string{hint}, addrs...)
		case final != nil && final(err):
			return "", err
		}
		last = err
	}
	return "", last
}
