package lifecycle

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"
)

func TestManagerFlags(t *testing.T) {
	t.Setenv("LEASEHOLD_MANAGER", "10.0.0.1:7400,10.0.0.2:7400")
	parse := func(args ...string) (manager, namespace string, err error) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		ManagerFlags(fs, &manager, &namespace)
		return manager, namespace, fs.Parse(args)
	}
	if m, ns, err := parse(); err != nil || m != "10.0.0.1:7400,10.0.0.2:7400" || ns != "" {
		t.Errorf("no flags: manager %q, namespace %q, %v; want $LEASEHOLD_MANAGER and the default namespace", m, ns, err)
	}
	if m, ns, err := parse("--manager", "127.0.0.1:1", "--namespace", "kv"); err != nil || m != "127.0.0.1:1" || ns != "kv" {
		t.Errorf("flags given: manager %q, namespace %q, %v", m, ns, err)
	}
	t.Setenv("LEASEHOLD_MANAGER", "")
	if m, _, _ := parse(); m != "127.0.0.1:7400" {
		t.Errorf("no $LEASEHOLD_MANAGER: manager %q, want 127.0.0.1:7400", m)
	}
	_, _, err := parse("-h")
	if code := ParseExit(err); code != 0 {
		t.Errorf("ParseExit(%v) = %d, want 0 for help", err, code)
	}
	_, _, err = parse("--bogus")
	if code := ParseExit(err); code != 2 {
		t.Errorf("ParseExit(%v) = %d, want 2 for a usage error", err, code)
	}
	if code := ParseExit(fmt.Errorf("wrapped: %w", flag.ErrHelp)); code != 0 || ParseExit(errors.New("x")) != 2 {
		t.Error("ParseExit does not look through wrapping")
	}
}
