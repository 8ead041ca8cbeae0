// Package doccmd finds the command lines the documentation shows, so tests
// beside each program can check them against the program: that every flag
// a doc names exists, that every subcommand does, and that the sample
// output matches what the program prints. It reads README.md and
// docs/*.md: fenced code blocks, indented code blocks, and inline code
// spans that start with the program's name.
package doccmd

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Command is one command line a doc shows.
type Command struct {
	File string   // relative to the module root, with forward slashes
	Line int      // 1-based
	Args []string // after the program's name, shell words, placeholders kept
	// Output is the sample output that follows the command in its code
	// block, up to the next command line ("$ …") or the end of the block;
	// empty for a command that shows none or is not in a block.
	Output []string
	// Inline says the command is an inline code span in prose.
	Inline bool
}

// Docs returns the documents doccmd reads under root: README.md and
// docs/*.md, sorted.
func Docs(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(docs)
	return append([]string{filepath.Join(root, "README.md")}, docs...), nil
}

// Find returns the command lines of prog ("leasehold", "kv") in the docs
// under root, in order. A command is written "prog …", "bin/prog …" or
// "./prog …", perhaps after a "$ " prompt and environment assignments, and
// may be one of several joined by "&&", ";" or "|".
func Find(root, prog string) ([]Command, error) {
	docs, err := Docs(root)
	if err != nil {
		return nil, err
	}
	var out []Command
	for _, path := range docs {
		cmds, err := findIn(root, path, prog)
		if err != nil {
			return nil, err
		}
		out = append(out, cmds...)
	}
	return out, nil
}

// line is one line of a doc, numbered from 1.
type line struct {
	n    int
	text string
}

func findIn(root, path, prog string) ([]Command, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rel, _ := filepath.Rel(root, path)
	rel = filepath.ToSlash(rel)
	var out []Command
	var block []line // the code block being read
	fenced, prevBlank := false, true
	flush := func() {
		out = append(out, inBlock(rel, block, prog)...)
		block = nil
	}
	for i, text := range strings.Split(string(b), "\n") {
		n, trimmed := i+1, strings.TrimSpace(text)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			if fenced {
				flush()
			}
			fenced = !fenced
		case fenced:
			block = append(block, line{n, text})
		case strings.HasPrefix(text, "    ") && (prevBlank || len(block) > 0):
			block = append(block, line{n, text})
		case trimmed == "" && len(block) > 0:
			block = append(block, line{n, text}) // a blank line inside an indented block
		default:
			if len(block) > 0 {
				flush()
			}
			for _, span := range inlineSpans(text) {
				for _, args := range commandsIn(span, prog) {
					out = append(out, Command{File: rel, Line: n, Args: args, Inline: true})
				}
			}
		}
		prevBlank = trimmed == ""
	}
	flush()
	return out, nil
}

// inBlock returns prog's commands in a code block. In a block that shows
// prompts ("$ "), only the prompted lines are commands and the lines after
// each are its output; in one without, every line that runs prog is. A
// line ending in a backslash continues on the next.
func inBlock(file string, block []line, prog string) []Command {
	prompts := false
	for _, l := range block {
		prompts = prompts || strings.HasPrefix(strings.TrimSpace(l.text), "$ ")
	}
	var out []Command
	var last *Command
	pending, from := "", 0
	for _, l := range block {
		trimmed := strings.TrimSpace(l.text)
		if strings.HasSuffix(trimmed, "\\") && (!prompts || pending != "" || strings.HasPrefix(trimmed, "$ ")) {
			if pending == "" {
				from = l.n
			}
			pending += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		at := l.n
		if pending != "" {
			trimmed, at, pending = pending+trimmed, from, ""
		}
		isCmd := !prompts || strings.HasPrefix(trimmed, "$ ")
		if !isCmd {
			if last != nil && trimmed != "" {
				last.Output = append(last.Output, l.text)
			}
			continue
		}
		last = nil
		for _, args := range commandsIn(strings.TrimPrefix(trimmed, "$ "), prog) {
			out = append(out, Command{File: file, Line: at, Args: args})
			last = &out[len(out)-1]
		}
	}
	return out
}

// inlineSpans returns the `code spans` of a line of prose.
func inlineSpans(line string) []string {
	var out []string
	for {
		i := strings.IndexByte(line, '`')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(line[i+1:], '`')
		if j < 0 {
			return out
		}
		out = append(out, line[i+1:i+1+j])
		line = line[i+1+j+1:]
	}
}

// commandsIn splits a shell line into its commands and returns the
// arguments of each that runs prog.
func commandsIn(line, prog string) [][]string {
	var out [][]string
	for _, words := range split(line) {
		for len(words) > 0 && (isAssignment(words[0]) || shellWords[words[0]]) {
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		switch words[0] {
		case prog, "bin/" + prog, "./" + prog, "./bin/" + prog:
			out = append(out, words[1:])
		}
	}
	return out
}

// shellWords may precede a command on a line: "for …; do bin/leasehold …".
var shellWords = map[string]bool{"do": true, "then": true, "else": true, "time": true, "exec": true, "nohup": true}

func isAssignment(w string) bool {
	i := strings.IndexByte(w, '=')
	return i > 0 && !strings.HasPrefix(w, "-") && strings.ToUpper(w[:i]) == w[:i]
}

// split splits a shell line into the words of each command: quotes are
// honoured, a comment ("#" at a word's start) ends the line, and "&&",
// "||", ";", "|", "&" and redirections end a command (a redirection's
// target is dropped).
func split(line string) [][]string {
	var cmds [][]string
	var words []string
	var cur strings.Builder
	inWord, quote := false, byte(0)
	dropNext := false // the next word is a redirection's target
	end := func() {
		if inWord {
			if dropNext {
				dropNext = false
			} else {
				words = append(words, cur.String())
			}
			cur.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		end()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			end()
		case c == '#' && !inWord:
			endCmd()
			return cmds
		case c == '&' || c == ';' || c == '|':
			endCmd()
			if i+1 < len(line) && (line[i+1] == c) {
				i++
			}
		case c == '>' || c == '<':
			end()
			dropNext = true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

// Flags returns the flag names a command line uses ("--manager" gives
// "manager", "--json=false" gives "json", "-h" gives "h"), with the index
// of each in args. Words after "--" are not flags.
func Flags(args []string) (names []string, at []int) {
	for i, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" || isNumber(a) {
			continue
		}
		name := strings.TrimLeft(a, "-")
		if j := strings.IndexByte(name, '='); j >= 0 {
			name = name[:j]
		}
		if name == "" || strings.ContainsAny(name, "…<>[]") {
			continue
		}
		names, at = append(names, name), append(at, i)
	}
	return names, at
}

func isNumber(s string) bool {
	for _, c := range strings.TrimPrefix(s, "-") {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}
