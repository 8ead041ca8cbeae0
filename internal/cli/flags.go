package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/runtime"
	"github.com/leasehold/leasehold/manager"
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

// clientOptions are the flags of every subcommand that talks to a Manager.
type clientOptions struct {
	manager   string        // host:port
	namespace string        // the namespace to ask about
	json      bool          // machine-readable output
	timeout   time.Duration // how long to wait for the Manager
}

func (o *clientOptions) addFlags(cmd *cobra.Command, e *env, namespaceUsage string) {
	f := cmd.Flags()
	f.StringVar(&o.manager, "manager", e.defaultManager(), "dial the Manager at `ADDR`, host:port ($"+ManagerEnv+" sets the default)")
	f.StringVar(&o.namespace, "namespace", manager.DefaultNamespace, namespaceUsage)
	f.BoolVar(&o.json, "json", false, "print JSON instead of text")
	f.DurationVar(&o.timeout, "timeout", 5*time.Second, "how long to wait for the Manager")
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
	return nil
}

// status asks the Manager for its Status, within o.timeout. namespace ""
// asks for every namespace. Errors say whether the Manager could not be
// reached or refused.
func (o *clientOptions) status(ctx context.Context, namespace string) (*pb.StatusResponse, error) {
	conn, err := runtime.Dial(o.manager, nil)
	if err != nil {
		return nil, fmt.Errorf("invalid --manager address %q: %w", o.manager, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	resp, err := pb.NewAdminClient(conn).Status(ctx, &pb.StatusRequest{Namespace: namespace})
	if err != nil {
		return nil, o.managerError(err)
	}
	return resp, nil
}

// managerError describes an error of a call to the Manager.
func (o *clientOptions) managerError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("cannot reach the manager at %s: no answer within %s", o.manager, o.timeout)
		}
		return fmt.Errorf("manager at %s: %w", o.manager, err)
	}
	msg := strings.TrimPrefix(st.Message(), "leasehold: ")
	switch st.Code() {
	case codes.Unavailable:
		// gRPC says `connection error: desc = "transport: Error while
		// dialing: dial tcp …: connect: connection refused"`; keep the end.
		if _, cause, ok := strings.Cut(msg, "Error while dialing: "); ok {
			msg = strings.TrimSuffix(cause, `"`)
		}
		return fmt.Errorf("cannot reach the manager at %s: %s", o.manager, msg)
	case codes.DeadlineExceeded:
		return fmt.Errorf("cannot reach the manager at %s: no answer within %s", o.manager, o.timeout)
	case codes.Canceled:
		return fmt.Errorf("interrupted while waiting for the manager at %s", o.manager)
	}
	return fmt.Errorf("manager at %s: %s", o.manager, msg)
}
