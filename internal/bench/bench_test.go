package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmoke runs every scenario at a tiny size and writes its output: the
// code of the long runs, in seconds.
func TestSmoke(t *testing.T) {
	for _, s := range Scenarios() {
		t.Run(s[0], func(t *testing.T) {
			t.Parallel()
			r, err := Run(context.Background(), s[0], Options{Size: Smoke})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			var out bytes.Buffer
			files, err := r.Write(dir, &out)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(out.String())
			pngs := 0
			for _, f := range files {
				st, err := os.Stat(f)
				if err != nil || st.Size() == 0 {
					t.Errorf("%s: missing or empty (%v)", f, err)
				}
				if filepath.Ext(f) == ".png" {
					pngs++
				}
			}
			if pngs != len(r.Figures) || pngs == 0 {
				t.Errorf("%d PNGs for %d figures", pngs, len(r.Figures))
			}
			for _, f := range r.Figures {
				if f.Paper == "" || f.Setup == "" || f.Ours == "" || f.Measured == "" || f.XLabel == "" || f.YLabel == "" {
					t.Errorf("figure %s lacks its paper, setup, measurement or axis labels", f.Name)
				}
				for _, s := range f.Series {
					if len(s.X) == 0 {
						t.Errorf("figure %s: series %q is empty", f.Name, s.Name)
					}
				}
			}
			if !strings.Contains(out.String(), "paper:") {
				t.Error("the summary does not cite the paper")
			}
		})
	}
}

func TestUnknownScenario(t *testing.T) {
	if _, err := Run(context.Background(), "nope", Options{Size: Smoke}); err == nil {
		t.Fatal("no error for an unknown scenario")
	}
}
