package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/internal/docs/doccmd"
)

// moduleRoot returns the nearest directory above the test's with a go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = up
	}
}

// placeholder says a doc's word stands for a value rather than being one:
// ID, ADDR, $P, …, <pid>.
var placeholder = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$|\$|…|\.\.\.|<|\[`)

// checkDocCommand checks one documented command line against a fresh
// command tree: each subcommand exists, each flag exists where it is used,
// and each flag value the doc gives (not a placeholder) parses. It returns
// the command found and the problems.
func checkDocCommand(args []string) (*cobra.Command, []string) {
	root := newRoot(&env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }})
	root.InitDefaultHelpFlag()
	root.InitDefaultVersionFlag()
	cmd := root
	var problems []string
	walking := true
	lookup := func(name string) *pflag.Flag {
		fs := cmd.Flags()
		if f := fs.Lookup(name); f != nil {
			return f
		}
		if f := cmd.InheritedFlags().Lookup(name); f != nil {
			return f
		}
		if len(name) == 1 {
			if f := fs.ShorthandLookup(name); f != nil {
				return f
			}
		}
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			cmd.InitDefaultHelpFlag()
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if placeholder.MatchString(name) {
				continue
			}
			f := lookup(name)
			if f == nil {
				problems = append(problems, fmt.Sprintf("%s has no flag --%s", cmd.CommandPath(), name))
				continue
			}
			if !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
				i++
				value, hasValue = args[i], true
			}
			if hasValue && !placeholder.MatchString(value) {
				if err := f.Value.Set(value); err != nil {
					problems = append(problems, fmt.Sprintf("%s --%s %s: %v", cmd.CommandPath(), name, value, err))
				}
			}
			continue
		}
		if !walking || !cmd.HasSubCommands() {
			walking = false
			continue
		}
		var next *cobra.Command
		for _, alt := range strings.Split(a, "|") {
			c, _, err := cmd.Find([]string{alt})
			if err != nil || c == cmd {
				if !cmd.Runnable() {
					problems = append(problems, fmt.Sprintf("%s has no subcommand %q", cmd.CommandPath(), alt))
				}
				continue
			}
			next = c
		}
		if next == nil {
			walking = false
			continue
		}
		cmd = next
	}
	return cmd, problems
}

// TestDocsCommands checks every leasehold command line in README.md and
// docs/*.md against the command tree (subcommands, flags, flag values),
// runs the --help of each command they name, and checks the sample
// output of status and cluster status against what they print: the table
// headers and the readiness lines.
func TestDocsCommands(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	cmds, err := doccmd.Find(root, "leasehold")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) < 50 {
		t.Fatalf("found %d leasehold command lines in the docs; the scan missed them", len(cmds))
	}
	paths := map[string]bool{}
	for _, c := range cmds {
		cmd, problems := checkDocCommand(c.Args)
		for _, p := range problems {
			t.Errorf("%s:%d: leasehold %s: %s", c.File, c.Line, strings.Join(c.Args, " "), p)
		}
		paths[strings.TrimPrefix(cmd.CommandPath(), "leasehold")] = true
	}
	for _, p := range slices.Sorted(mapKeys(paths)) {
		args := append(strings.Fields(p), "--help")
		if code, _, stderr := cli(t, args...); code != ExitOK {
			t.Errorf("leasehold %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
	}
	checkDocSamples(t, cmds)
	checkNotBuilt(t, root)
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// tableHeader finds a table's header line: two or more words of capitals
// (READ LEASE, SHARE%, LOAD/s).
var tableHeader = regexp.MustCompile(`^\s+ID\s+ADDR\s+[A-Z]`)

// readinessLine is status's line per replica: "  ADDR: ready (…)".
var readinessLine = regexp.MustCompile(`^\s+\S+: (ready|not ready) \(`)

// checkDocSamples compares the sample output the docs show after status
// and cluster status with what they print against a Manager: every table
// header a sample shows must be the one printed, and a sample of status
// that shows the replicas' table must show their readiness too.
func checkDocSamples(t *testing.T, cmds []doccmd.Command) {
	addr := startManager(t)
	startOwner(t, addr, "kv-1", "127.0.0.1:8001")
	waitFor(t, "an owner in status", 10*time.Second, func() bool {
		_, stdout, _ := cli(t, "status", "--manager", addr)
		return strings.Contains(stdout, "kv-1")
	})
	printed := map[string][]string{}
	for _, which := range []string{"status", "cluster status"} {
		args := append(strings.Fields(which), "--manager", addr)
		code, stdout, stderr := cli(t, args...)
		if code != ExitOK {
			t.Fatalf("leasehold %s: exit %d: %s", which, code, stderr)
		}
		printed[which] = strings.Split(stdout, "\n")
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, c := range cmds {
		cmd, _ := checkDocCommand(c.Args)
		which := strings.TrimPrefix(cmd.CommandPath(), "leasehold ")
		real, ok := printed[which]
		if !ok || len(c.Output) == 0 {
			continue
		}
		var headers []string
		ready := false
		for _, l := range real {
			if tableHeader.MatchString(l) {
				headers = append(headers, norm(l))
			}
			ready = ready || readinessLine.MatchString(l)
		}
		sampleReplicas, sampleReady := false, false
		for _, l := range c.Output {
			sampleReady = sampleReady || readinessLine.MatchString(l)
			if !tableHeader.MatchString(l) {
				continue
			}
			sampleReplicas = sampleReplicas || strings.Contains(l, "ROLE")
			if !slices.Contains(headers, norm(l)) {
				t.Errorf("%s:%d: the sample of leasehold %s shows the header %q; it prints one of %q", c.File, c.Line, which, norm(l), headers)
			}
		}
		if which == "status" && sampleReplicas && ready && !sampleReady {
			t.Errorf("%s:%d: the sample of leasehold status shows the replicas without their readiness lines (\"ADDR: ready (…)\")", c.File, c.Line)
		}
	}
}

// docCommands maps a doc about one command to it.
var docCommands = map[string]string{"docs/gateway.md": "gateway", "docs/security.md": "", "README.md": ""}

// notBuilt finds a sentence that says a feature is missing.
var notBuilt = regexp.MustCompile(`(?i)[^.]*\b(?:not (?:yet )?built|not implemented|not supported|not yet available)[^.]*`)

// checkNotBuilt fails on a doc about a command that says a feature is not
// built while the command has a flag of that feature's name: docs/gateway.md
// saying TLS is not built while leasehold gateway has --tls.
func checkNotBuilt(t *testing.T, root string) {
	for doc, path := range docCommands {
		if path == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		cmd, problems := checkDocCommand(strings.Fields(path))
		if len(problems) > 0 {
			t.Fatalf("%s: %v", path, problems)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		for _, sentence := range notBuilt.FindAllString(text, -1) {
			for _, w := range regexp.MustCompile(`[A-Za-z][A-Za-z-]+`).FindAllString(sentence, -1) {
				if f := cmd.Flags().Lookup(strings.ToLower(w)); f != nil {
					t.Errorf("%s says %q, but leasehold %s has --%s (%s)", doc, strings.TrimSpace(sentence), path, f.Name, f.Usage)
				}
			}
		}
	}
}

// TestDocsCommandsCatch shows the check fails on a flag, a subcommand or a
// flag value that does not exist, and passes placeholders.
func TestDocsCommandsCatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args string
		want string // "" for none
	}{
		{"status --manager 127.0.0.1:7400 --json", ""},
		{"cluster add ID ADDR --manager $M", ""},
		{"cluster add|remove", ""},
		{"manager --drain-gate N --timings fast", ""},
		{"--version", ""},
		{"status --bogus", "leasehold status has no flag --bogus"},
		{"clustr status", `leasehold has no subcommand "clustr"`},
		{"cluster frob", `leasehold cluster has no subcommand "frob"`},
		{"manager --timings fastt", "leasehold manager --timings fastt: must be"},
		{"dashboard --namespaces a", "leasehold dashboard has no flag --namespaces"},
	} {
		_, problems := checkDocCommand(strings.Fields(c.args))
		got := strings.Join(problems, "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("leasehold %s: %q; want %q", c.args, got, c.want)
		}
	}
}
