package kv

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/docs/doccmd"
)

// flagLine is a flag in the flag package's usage: "  -name type".
var flagLine = regexp.MustCompile(`(?m)^  -(\S+)`)

// TestDocsCommands checks every kv command line in README.md and docs/*.md:
// its subcommand exists, its -h runs, and each flag it names is one of the
// subcommand's.
func TestDocsCommands(t *testing.T) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "..", "..", "..")
	cmds, err := doccmd.Find(root, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) < 5 {
		t.Fatalf("found %d kv command lines in the docs; the scan missed them", len(cmds))
	}
	flags := map[string][]string{} // by subcommand
	for _, sub := range []string{"serve", "put", "get"} {
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), []string{sub, "-h"}, &stdout, &stderr); code != exitOK {
			t.Fatalf("kv %s -h: exit %d: %s", sub, code, stderr.String())
		}
		for _, m := range flagLine.FindAllStringSubmatch(stderr.String(), -1) {
			flags[sub] = append(flags[sub], m[1])
		}
	}
	for _, c := range cmds {
		if len(c.Args) == 0 {
			continue
		}
		sub := c.Args[0]
		if sub == "--help" || sub == "-h" {
			continue // kv's own usage, always there
		}
		have, ok := flags[sub]
		if !ok {
			t.Errorf("%s:%d: kv %s: kv has no subcommand %q", c.File, c.Line, strings.Join(c.Args, " "), sub)
			continue
		}
		names, _ := doccmd.Flags(c.Args[1:])
		for _, n := range names {
			if !slices.Contains(have, n) && n != "h" && n != "help" {
				t.Errorf("%s:%d: kv %s: kv %s has no flag --%s", c.File, c.Line, strings.Join(c.Args, " "), sub, n)
			}
		}
	}
}
