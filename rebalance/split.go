package rebalance

import (
	"math"

	"github.com/leasehold/leasehold/keyspace"
)

// A piece's load is known only as a whole. To split it, the load is modelled
// as the reported hot keys at their points plus the rest spread evenly over
// the piece's other keys: hashing spreads unreported keys uniformly, and any
// key hot enough to matter should be reported. Splits come after the round's
// moves and the next round measures the parts, so a wrong estimate costs a
// round, never the budget.

// rest returns p's load outside its hot keys, and the number of keys it is
// spread over: p's other keys.
func (p *piece) rest() (load, keys float64) {
	load = p.load
	for _, h := range p.hot {
		load -= h.Load
	}
	return max(load, 0), p.r.Size() - float64(len(p.hot))
}

// density returns the load per key of p outside its hot keys.
func (p *piece) density() float64 {
	load, keys := p.rest()
	if !(keys > 0) {
		return 0
	}
	return load / keys
}

// cuts returns where to split p: around every hot key whose load exceeds
// limit (so that it gets a range of its own), and through every remaining
// stretch whose estimated load exceeds limit, into the fewest parts of equal
// estimated load that are each within limit. The keys are in increasing
// order, each strictly inside p.r.
func (p *piece) cuts(limit float64) []keyspace.Key {
	if p.oneKey() || p.load <= limit {
		return nil
	}
	rho := p.density()
	var out []keyspace.Key
	add := func(k keyspace.Key) {
		// Strictly inside p.r; k+1 past MaxKey wraps to 0, which is never
		// inside.
		if k > p.r.Start && p.r.Contains(k) && (len(out) == 0 || k > out[len(out)-1]) {
			out = append(out, k)
		}
	}
	// stretch cuts [a, b) (b == 0: the end of the key space), holding the
	// hot keys hs, which are none of them isolated.
	stretch := func(a, b keyspace.Key, hs []HotKey) {
		size := keyspace.Range{Start: a, End: b}.Size()
		est := rho * size
		for _, h := range hs {
			est += h.Load
		}
		if est <= limit {
			return
		}
		n := int(math.Ceil(est / limit))
		next := 1 // the part whose start is sought next
		want := func() float64 { return est * float64(next) / float64(n) }
		cur, cum := a, 0.0 // the key reached, and the load below it
		// uniform places the cuts that fall in the even stretch [cur, cur+span).
		uniform := func(span float64) {
			for next < n && rho > 0 && want() < cum+rho*span {
				off := (want() - cum) / rho
				add(cur + offset(off, span))
				next++
			}
			cum += rho * span
		}
		for _, h := range hs {
			uniform(float64(h.Key - cur)) // the keys before the hot key
			// A cut that falls on the key itself goes before or after it,
			// whichever is nearer.
			for next < n && want() < cum+h.Load {
				if want()-cum < h.Load/2 {
					add(h.Key)
				} else {
					add(h.Key + 1)
				}
				next++
			}
			cum += h.Load
			cur = h.Key + 1
			if cur == 0 {
				return // the hot key was the last key of the key space
			}
		}
		// The rest: [cur, b), b == 0 meaning the end; cur is 0 only when
		// the stretch is the whole key space.
		uniform(keyspace.Range{Start: cur, End: b}.Size())
	}

	// Isolate every hot key above the limit, and cut the stretches between.
	a := p.r.Start
	var between []HotKey
	for _, h := range p.hot {
		if h.Load <= limit {
			between = append(between, h)
			continue
		}
		if h.Key != a {
			stretch(a, h.Key, between)
		}
		add(h.Key)
		add(h.Key + 1)
		between = between[:0]
		a = h.Key + 1
		if a == 0 {
			return out
		}
	}
	if p.r.End == 0 || a < p.r.End {
		stretch(a, p.r.End, between)
	}
	return out
}

// offset converts a key count in [0, span) to a Key, clamped into the span
// and below 2^64 (which float64 rounding could otherwise reach).
func offset(off, span float64) keyspace.Key {
	off = max(0, min(off, span-1, math.Nextafter(keySpace, 0)))
	return keyspace.Key(off)
}

// splitAt returns the parts of p cut at cuts (from p.cuts), each with its
// estimated load and its hot keys, marked fresh. The parts' loads add up to
// p's, and a part's hot keys count at their reported loads exactly.
func (p *piece) splitAt(cuts []keyspace.Key) []piece {
	rho := p.density()
	rest, _ := p.rest()
	out := make([]piece, 0, len(cuts)+1)
	start := p.r.Start
	j := 0
	spread := 0.0 // of rest, given out so far
	for i := 0; i <= len(cuts); i++ {
		end := p.r.End
		if i < len(cuts) {
			end = cuts[i]
		}
		q := piece{r: keyspace.Range{Start: start, End: end}, owner: p.owner, from: p.from, fresh: true}
		for ; j < len(p.hot) && q.r.Contains(p.hot[j].Key); j++ {
			q.hot = append(q.hot, p.hot[j])
			q.load += p.hot[j].Load
		}
		share := rho * (q.r.Size() - float64(len(q.hot)))
		if i == len(cuts) {
			share = max(rest-spread, 0) // the last part takes what rounding left
		}
		spread += share
		q.load += share
		out = append(out, q)
		start = end
	}
	return out
}
