package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// designDoc is the document whose numbered rules the tree cites.
const designDoc = "docs/design.md"

// ruleHeading is how docs/design.md numbers a rule: "### 8. A leader ...".
var ruleHeading = regexp.MustCompile(`(?m)^### ([0-9]+)\. \S`)

// citation finds "rule 8", "rules 8 and 10", "rules 3, 5 or 7" in text whose
// comment markers and line breaks have been flattened (see flatten).
var citation = regexp.MustCompile(`(?i)\brules? ([0-9]+)((?:(?:, | and | or | to )[0-9]+)*)`)

// commentLead is what starts a continued comment line in the files scanned:
// Go's "//", a script's "#", a block comment's "*".
var commentLead = regexp.MustCompile(`(?m)^[ \t]*(?://+|#+|\*)[ \t]?`)

// flatten joins a file's lines into one, without comment markers, so a
// citation broken across two comment lines ("rule\n// 8") reads as one.
func flatten(text string) string {
	return strings.Join(strings.Fields(commentLead.ReplaceAllString(text, "")), " ")
}

// rules returns the rule numbers design defines. They must run 1, 2, …
// without a gap or a repeat: the numbering is stable, so a rule is never
// renumbered, and one withdrawn keeps its heading to say so.
func rules(design string) (map[int]bool, error) {
	out := map[int]bool{}
	for i, m := range ruleHeading.FindAllStringSubmatch(design, -1) {
		n, _ := strconv.Atoi(m[1])
		if n != i+1 {
			return nil, fmt.Errorf("rule %d follows rule %d; rules are numbered 1, 2, … in order", n, i)
		}
		out[n] = true
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no rule (headings \"### N. Title\")")
	}
	return out, nil
}

// unknownCitations returns each citation in text of a rule not in defined.
func unknownCitations(text string, defined map[int]bool) []string {
	var bad []string
	for _, m := range citation.FindAllStringSubmatch(flatten(text), -1) {
		nums := []string{m[1]}
		nums = append(nums, regexp.MustCompile(`[0-9]+`).FindAllString(m[2], -1)...)
		for _, s := range nums {
			if n, err := strconv.Atoi(s); err != nil || !defined[n] {
				bad = append(bad, fmt.Sprintf("%q names rule %s", m[0], s))
			}
		}
	}
	return bad
}

// root returns the module's root directory, the nearest above the test's
// working directory with a go.mod.
func root(t *testing.T) string {
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

// TestRuleCitations checks every "rule N" in the tree's Go files, Markdown
// and golden scripts against the rules of docs/design.md.
func TestRuleCitations(t *testing.T) {
	dir := root(t)
	design, err := os.ReadFile(filepath.Join(dir, designDoc))
	if err != nil {
		t.Fatal(err)
	}
	defined, err := rules(string(design))
	if err != nil {
		t.Fatalf("%s: %v", designDoc, err)
	}
	scanned := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == filepath.Join("docs", "results")) {
				return filepath.SkipDir // VCS and tool state; the experiments' output
			}
			return nil
		}
		if !slices.Contains([]string{".go", ".md", ".txt"}, filepath.Ext(path)) ||
			filepath.Dir(rel) == filepath.Join("internal", "docs") { // this test's examples
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		scanned++
		for _, b := range unknownCitations(string(text), defined) {
			t.Errorf("%s: %s, which %s does not define", filepath.ToSlash(rel), b, designDoc)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 100 {
		t.Fatalf("scanned %d files under %s; the walk missed the tree", scanned, dir)
	}
}

// TestRuleCitationsCatch shows the check can fail: on citations of rules
// design.md does not have, however a comment wraps them, and not on the
// rules it has or on "rule" without a number.
func TestRuleCitationsCatch(t *testing.T) {
	defined := map[int]bool{1: true, 2: true, 8: true}
	for _, c := range []struct {
		text string
		bad  int
	}{
		{"// the leader commits first (docs/design.md rule 8).", 0},
		{"// the leader commits first (docs/design.md rule\n// 8).", 0},
		{"# see rules 1 and 2 in design.md", 0},
		{"Centrifuge's rule moves one virtual node at a time", 0},
		{"// the new leader reserves (docs/design.md rule 10)", 1},
		{"// the new leader reserves (docs/design.md\n\t// rule 12).", 1},
		{"see rules 2, 3 or 8", 1},
		{"Rule 99 says nothing", 1},
	} {
		if got := unknownCitations(c.text, defined); len(got) != c.bad {
			t.Errorf("unknownCitations(%q) = %q, want %d", c.text, got, c.bad)
		}
	}
	for _, design := range []string{
		"### 1. A\n### 3. C\n",    // a gap
		"### 1. A\n### 1. B\n",    // a repeat
		"## Protocol rules\n1. A", // no heading
	} {
		if _, err := rules(design); err == nil {
			t.Errorf("rules(%q) accepted it", design)
		}
	}
	if got, err := rules("### 1. A\ntext\n### 2. B\n"); err != nil || !got[1] || !got[2] || len(got) != 2 {
		t.Errorf("rules of two headings = %v, %v; want {1, 2}", got, err)
	}
}
