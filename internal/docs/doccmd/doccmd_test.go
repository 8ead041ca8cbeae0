package doccmd

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		line string
		want [][]string
	}{
		{`bin/kv put alice hello && bin/kv get alice`, [][]string{{"bin/kv", "put", "alice", "hello"}, {"bin/kv", "get", "alice"}}},
		{`leasehold gateway --route 'name=kv,prefix=/kv/' &   # a comment`, [][]string{{"leasehold", "gateway", "--route", "name=kv,prefix=/kv/"}}},
		{`leasehold backup - > out.db; ls`, [][]string{{"leasehold", "backup", "-"}, {"ls"}}},
		{`echo "a b" | leasehold x`, [][]string{{"echo", "a b"}, {"leasehold", "x"}}},
	} {
		if got := split(c.line); !reflect.DeepEqual(got, c.want) {
			t.Errorf("split(%q) = %q; want %q", c.line, got, c.want)
		}
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	readme := "Run `leasehold status --json` or:\n\n```\n$ export X=1\n$ bin/leasehold status\nleader: manager 1\n  ID  ADDR\n$ for p in 1 2; do bin/leasehold cert create-owner $p; done\n```\n\nIndented:\n\n    leasehold manager --id 1 \\\n        --listen 127.0.0.1:7401\n"
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(readme), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Find(dir, "leasehold")
	if err != nil {
		t.Fatal(err)
	}
	want := []Command{
		{File: "README.md", Line: 1, Args: []string{"status", "--json"}, Inline: true},
		{File: "README.md", Line: 5, Args: []string{"status"}, Output: []string{"leader: manager 1", "  ID  ADDR"}},
		{File: "README.md", Line: 8, Args: []string{"cert", "create-owner", "$p"}},
		{File: "README.md", Line: 13, Args: []string{"manager", "--id", "1", "--listen", "127.0.0.1:7401"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Find = %+v\nwant %+v", got, want)
	}
	names, _ := Flags([]string{"--a", "b", "-c=1", "--", "--d", "-5"})
	if !reflect.DeepEqual(names, []string{"a", "c"}) {
		t.Errorf("Flags = %q", names)
	}
}
