package rebalance

import (
	"cmp"
	"slices"
)

// weighted is the policy Weighted returns.
type weighted struct{ cfg Config }

// Weighted returns the load-aware policy: Slicer's weighted move under a
// churn budget, with capacity weights, hot-key isolation and hysteresis. See
// the package documentation for the algorithm. Zero fields of cfg take their
// defaults; an invalid cfg is an error wrapping ErrInvalidConfig.
func Weighted(cfg Config) (Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return weighted{cfg.withDefaults()}, nil
}

// Plan implements Policy.
func (w weighted) Plan(in Input) (Plan, error) {
	r, err := start(in)
	if r == nil {
		return Plan{}, err
	}
	r.placeOrphans()
	if !(r.total > 0) {
		return r.plan(0, 0), nil // nothing measured: nothing to balance
	}
	level := r.setTargets()
	mergeLoad := w.cfg.MergeLoad * level
	splits := 0
	if r.imbalanced(w.cfg.Tolerance, mergeLoad) {
		r.weightedMoves(w.cfg.Target, w.cfg.budgetFor(in.Elapsed))
		splits = r.split(w.cfg.Target, w.cfg.SplitLoad*level, w.cfg.MaxSegmentsPerOwner*len(r.owners))
	}
	merges := r.merge(mergeLoad)
	return r.plan(splits, merges), nil
}

// setTargets gives every owner its fair load and returns the level: the fair
// load per unit of capacity.
//
// The fair load is capacity × level, where the level is total load over
// total capacity — except for an owner holding an isolated key hotter than
// its fair share. No assignment can bring that owner below the key's load,
// so it is pinned: its target is that key alone, and the level is computed
// again over the other owners and the rest of the load. Without this, one
// 30% key among ten owners would leave every other owner "underloaded"
// against a mean it can never reach, and the rest would never balance.
func (r *round) setTargets() (level float64) {
	hottest := make([]float64, len(r.owners)) // each owner's hottest one-key piece
	for i := range r.pieces {
		if p := &r.pieces[i]; p.oneKey() {
			hottest[p.owner] = max(hottest[p.owner], p.load)
		}
	}
	for i := range r.owners {
		r.owners[i].pinned = false
	}
	for {
		load, capSum := r.total, 0.0
		for i := range r.owners {
			if o := &r.owners[i]; o.pinned {
				load -= o.target
			} else {
				capSum += o.cap
			}
		}
		if capSum > 0 {
			level = max(load, 0) / capSum
		}
		pinned := false
		for i := range r.owners {
			o := &r.owners[i]
			if !o.pinned && hottest[i] > o.cap*level {
				o.pinned, o.target, pinned = true, hottest[i], true
			}
		}
		if !pinned {
			break
		}
	}
	for i := range r.owners {
		if o := &r.owners[i]; !o.pinned {
			o.target = o.cap * level
		}
	}
	return level
}

// imbalanced reports whether some owner is above tol times its target (a
// pinned owner: carries more than slack besides its hot key), or below 2−tol
// times it.
func (r *round) imbalanced(tol, slack float64) bool {
	for i := range r.owners {
		if o := &r.owners[i]; o.over(tol, slack) || o.under(tol) {
			return true
		}
	}
	return false
}

// split splits the pieces above limit held by owners still over target
// after the moves, hottest first, while the table has fewer than maxPieces
// pieces, so that the next round has pieces small enough to move. It
// returns how many pieces it split. A pinned owner's pieces are not split:
// they are all to go, whole.
func (r *round) split(target, limit float64, maxPieces int) int {
	var todo []int
	for i := range r.pieces {
		p := &r.pieces[i]
		if o := &r.owners[p.owner]; p.load > limit && !p.oneKey() && !p.moved && !o.pinned && o.over(target, 0) {
			todo = append(todo, i)
		}
	}
	slices.SortStableFunc(todo, func(a, b int) int { return cmp.Compare(r.pieces[b].load, r.pieces[a].load) })
	parts := make(map[int][]piece, len(todo))
	n := len(r.pieces)
	for _, i := range todo {
		cuts := r.pieces[i].cuts(limit)
		if len(cuts) == 0 || n+len(cuts) > maxPieces {
			continue
		}
		parts[i] = r.pieces[i].splitAt(cuts)
		n += len(cuts)
	}
	if len(parts) == 0 {
		return 0
	}
	out := make([]piece, 0, n)
	for i, p := range r.pieces {
		if ps, ok := parts[i]; ok {
			out = append(out, ps...)
		} else {
			out = append(out, p)
		}
	}
	r.pieces = out
	return len(parts)
}

// weightedMoves moves pieces between owners until every owner is within
// target of its fair load or the budget is spent (Slicer's weighted move).
//
// While some owner is over target, the one with the largest load per unit of
// capacity sheds: of all (piece it holds, receiving owner) pairs that lower
// the larger load per unit of capacity of the two owners, it makes the move
// with the largest fall of Φ = Σ (load/capacity − mean)² × capacity per unit
// of budget the move costs. When no owner is over target but one is under
// 2−target (a new member), it receives in the same way from the owners above
// their fair load, as long as it stays within target. A pinned owner
// receives nothing. An owner no move can help is left for the next round.
// Every move lowers Φ, so no piece goes round in circles, and a moved piece
// does not move again in the round.
func (r *round) weightedMoves(target float64, b budget) {
	stuckHi := make([]bool, len(r.owners))
	stuckLo := make([]bool, len(r.owners))
	eps := 1e-9 * r.total
	for b.moves > 0 {
		hi, lo := -1, -1
		for i := range r.owners {
			o := &r.owners[i]
			if !stuckHi[i] && o.over(target, eps) && (hi < 0 || o.perCap() > r.owners[hi].perCap()) {
				hi = i
			}
			if !stuckLo[i] && o.under(target) && (lo < 0 || o.util() < r.owners[lo].util()) {
				lo = i
			}
		}
		var best candidate
		switch {
		case hi >= 0:
			best = r.bestMove(b, func(p *piece) bool { return p.owner == hi }, func(to int) bool { return !r.owners[to].pinned },
				func(from, to *owner, lf, lt float64) bool {
					return max(lf/from.cap, lt/to.cap) < from.perCap()*(1-1e-9)
				})
			if best.piece < 0 {
				stuckHi[hi] = true
				continue
			}
		case lo >= 0:
			best = r.bestMove(b,
				func(p *piece) bool {
					o := &r.owners[p.owner]
					return p.owner != lo && (o.util() > 1 || o.over(target, eps))
				},
				func(to int) bool { return to == lo },
				func(from, to *owner, lf, lt float64) bool {
					return lt <= target*to.target && min(lf/from.target, lt/to.target) > to.util()*(1+1e-9)
				})
			if best.piece < 0 {
				stuckLo[lo] = true
				continue
			}
		default:
			return
		}
		p := &r.pieces[best.piece]
		b.load -= p.load / r.total
		b.keys -= p.r.Size() / keySpace
		b.moves--
		r.move(best.piece, best.to)
	}
}

// candidate is a move: piece to owner, and its score.
type candidate struct {
	piece, to int
	score     float64
}

// bestMove returns the move with the best score among the pieces that
// movable accepts, to the owners that dest accepts, that fit the budget and
// that ok accepts given the two owners' loads after the move; piece is -1
// when there is none. Ties go to the first piece in key order, then the
// first owner in ID order.
func (r *round) bestMove(b budget, movable func(*piece) bool, dest func(int) bool,
	ok func(from, to *owner, loadFrom, loadTo float64) bool) candidate {
	best := candidate{piece: -1}
	for i := range r.pieces {
		p := &r.pieces[i]
		if p.moved || !(p.load > 0) || !movable(p) {
			continue
		}
		lf, kf := p.load/r.total, p.r.Size()/keySpace
		if lf > b.load+1e-12 || kf > b.keys+1e-12 {
			continue
		}
		// What the move costs: the largest share of a whole round's budget
		// it uses, at least one move's worth.
		cost := max(lf/b.fullLoad, kf/b.fullKeys, 1/float64(b.fullMoves))
		from := &r.owners[p.owner]
		for to := range r.owners {
			if to == p.owner || !dest(to) {
				continue
			}
			t := &r.owners[to]
			if !ok(from, t, from.load-p.load, t.load+p.load) {
				continue
			}
			// The fall of Φ when p.load moves from one owner to the other.
			gain := p.load * (2*(from.perCap()-t.perCap()) - p.load*(1/from.cap+1/t.cap))
			if !(gain > 0) {
				continue
			}
			if s := gain / cost; s > best.score {
				best = candidate{piece: i, to: to, score: s}
			}
		}
	}
	return best
}

// merge joins runs of adjacent pieces of one owner whose loads add up to at
// most limit, leaving alone the pieces split or moved in this round. It
// returns how many pieces disappeared.
func (r *round) merge(limit float64) int {
	out := r.pieces[:0]
	merged := 0
	for _, p := range r.pieces {
		if n := len(out); n > 0 {
			q := &out[n-1]
			if q.owner == p.owner && !q.fresh && !q.moved && !p.fresh && !p.moved && q.load+p.load <= limit {
				q.r.End = p.r.End
				q.load += p.load
				q.hot = append(q.hot, p.hot...)
				merged++
				continue
			}
		}
		out = append(out, p)
	}
	r.pieces = out
	return merged
}
