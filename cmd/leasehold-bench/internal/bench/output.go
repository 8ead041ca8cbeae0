package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Write writes the report into dir (created if missing): <figure>.png for
// each figure, <figure>-<series>.csv for each series, and summary.txt; and
// the summary to w. It returns the files written.
func (r *Report) Write(dir string, w io.Writer) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, f := range r.Figures {
		for _, s := range f.Series {
			name := filepath.Join(dir, f.Name+"-"+slug(s.Name)+".csv")
			if err := writeCSV(name, f, s); err != nil {
				return files, err
			}
			files = append(files, name)
		}
		name := filepath.Join(dir, f.Name+".png")
		if err := writePNG(name, f); err != nil {
			return files, err
		}
		files = append(files, name)
	}
	name := filepath.Join(dir, r.Scenario+"-summary.txt")
	sf, err := os.Create(name)
	if err != nil {
		return files, err
	}
	r.Summary(sf)
	if err := sf.Close(); err != nil {
		return files, err
	}
	files = append(files, name)
	r.Summary(w)
	return files, nil
}

func writeCSV(name string, f Figure, s Series) error {
	out, err := os.Create(name)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(out)
	_ = cw.Write([]string{f.XLabel, f.YLabel})
	for i := range s.X {
		_ = cw.Write([]string{strconv.FormatFloat(s.X[i], 'g', -1, 64), strconv.FormatFloat(s.Y[i], 'g', -1, 64)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func writePNG(name string, f Figure) error {
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text = f.XLabel
	p.Y.Label.Text = f.YLabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = f.LegendTop
	p.Legend.Left = f.Points // a sweep rises to the right
	for i, s := range f.Series {
		xy := make(plotter.XYs, len(s.X))
		for j := range s.X {
			xy[j].X, xy[j].Y = s.X[j], s.Y[j]
		}
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("bench: %s/%s: %w", f.Name, s.Name, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(2)
		l.Dashes = plotutil.Dashes(i)
		p.Add(l)
		if f.Points {
			sc, err := plotter.NewScatter(xy)
			if err != nil {
				return err
			}
			sc.Color = plotutil.Color(i)
			sc.Shape = plotutil.Shape(i)
			p.Add(sc)
			p.Legend.Add(s.Name, l, sc)
		} else {
			p.Legend.Add(s.Name, l)
		}
	}
	p.Legend.Padding = vg.Points(4)
	p.Y.Max *= 1.1 // room for the legend above the highest point
	return p.Save(9*vg.Inch, 5*vg.Inch, name)
}
