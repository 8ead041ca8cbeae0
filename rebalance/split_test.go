package rebalance

import (
	"math"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
)

func TestCuts(t *testing.T) {
	const half = keyspace.Key(1 << 63)
	r := func(s, e keyspace.Key) keyspace.Range { return keyspace.Range{Start: s, End: e} }
	for _, c := range []struct {
		name  string
		p     piece
		limit float64
		want  []keyspace.Key
	}{
		{"within the limit", piece{r: keyspace.Full, load: 1}, 1, nil},
		{"one key", piece{r: r(7, 8), load: 10}, 1, nil},
		{"halves of the key space", piece{r: keyspace.Full, load: 2}, 1, []keyspace.Key{half}},
		{"thirds", piece{r: r(0, 300), load: 3}, 1, []keyspace.Key{100, 200}},
		{"to the end of the key space", piece{r: r(half, 0), load: 2}, 1, []keyspace.Key{half + half/2}},
		{"a hot key is isolated", piece{r: r(0, 100), load: 6, hot: []HotKey{{Key: 40, Load: 5}}}, 2,
			[]keyspace.Key{40, 41}},
		{"a hot key first in the range", piece{r: r(40, 100), load: 6, hot: []HotKey{{Key: 40, Load: 5}}}, 2,
			[]keyspace.Key{41}},
		{"a hot key last in the key space", piece{r: r(half, 0), load: 6, hot: []HotKey{{Key: keyspace.MaxKey, Load: 5}}}, 2,
			[]keyspace.Key{keyspace.MaxKey}},
		{"the rest split around the hot key", piece{r: r(0, 100), load: 9, hot: []HotKey{{Key: 10, Load: 5}}}, 2,
			// The other 99 keys carry 4: [0,10) 0.40, [11,100) 3.60, which
			// is cut in two parts of 1.80, 44.55 keys from 11.
			[]keyspace.Key{10, 11, 55}},
		{"a warm key early: the cut goes after it", piece{r: r(0, 100), load: 3, hot: []HotKey{{Key: 30, Load: 1.5}}}, 2,
			// Half the load, 1.5, is reached 1.05 into the key's 1.5 (the 30
			// keys before it carry 0.45): nearer its end.
			[]keyspace.Key{31}},
		{"a warm key late: the cut goes before it", piece{r: r(0, 100), load: 3, hot: []HotKey{{Key: 70, Load: 1.5}}}, 2,
			// The 70 keys before it carry 1.06: half the load is 0.44 into it.
			[]keyspace.Key{70}},
		{"no load outside the hot keys", piece{r: r(0, 100), load: 4, hot: []HotKey{{Key: 20, Load: 2}, {Key: 60, Load: 2}}}, 3,
			// Half the load is reached at the start of the second key.
			[]keyspace.Key{60}},
	} {
		got := c.p.cuts(c.limit)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: cuts = %v, want %v", c.name, got, c.want)
			continue
		}
		parts := c.p.splitAt(got)
		var sum float64
		for i, q := range parts {
			sum += q.load
			if !q.fresh || q.owner != c.p.owner || !q.r.Valid() || (i > 0 && q.r.Start != parts[i-1].r.End) {
				t.Errorf("%s: part %d %+v is malformed", c.name, i, q)
			}
		}
		if len(got) > 0 && (parts[0].r.Start != c.p.r.Start || parts[len(parts)-1].r.End != c.p.r.End) {
			t.Errorf("%s: the parts do not cover %v: %v", c.name, c.p.r, parts)
		}
		if math.Abs(sum-c.p.load) > 1e-9 {
			t.Errorf("%s: the parts carry %g, want %g", c.name, sum, c.p.load)
		}
		for _, q := range parts {
			if q.oneKey() && len(q.hot) == 1 && q.load != q.hot[0].Load {
				t.Errorf("%s: isolated key %d carries %g, want its reported %g", c.name, q.r.Start, q.load, q.hot[0].Load)
			}
		}
	}
}
