package rebalance

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
)

// Segment is a range of keys, its owner, and the load measured on it.
type Segment struct {
	Range keyspace.Range
	Owner string
	// Load is the request rate on Range over the last measurement window
	// (requests/s, or any unit, as long as every Load and HotKey.Load of one
	// Input uses the same one). It must be finite and not negative.
	Load float64
}

func (s Segment) String() string { return fmt.Sprintf("%v→%s@%g", s.Range, s.Owner, s.Load) }

// HotKey is a single key and the load measured on it, in the unit of
// Segment.Load.
type HotKey struct {
	Key  keyspace.Key
	Load float64
}

// Input is what a round of rebalancing starts from.
type Input struct {
	// Members are the owners that may hold ranges, with their capacities
	// (assign.Member: Capacity ≤ 0 means 1). Order does not matter;
	// duplicates collapse into one member with the largest capacity; an
	// empty ID is ignored.
	Members []assign.Member
	// Current is the assignment the round starts from, with the load
	// measured on each range: sorted, covering the key space exactly
	// (assign.Assignment.Validate). A segment whose owner is not a member
	// is orphaned: its owner is gone, and so is its state.
	Current []Segment
	// HotKeys are single keys the owners report as hot, with their load.
	// Only a reported key can be isolated into a range of its own; keys not
	// reported are assumed spread evenly over their segment. Order does not
	// matter; of duplicates the largest load counts.
	HotKeys []HotKey
	// Elapsed is the time since the previous round's moves were issued,
	// on the caller's clock. A round moves at most Config.Interval's budget
	// scaled by Elapsed/Interval (never more than one Interval's worth), so
	// calling Plan more often than every Interval does not move faster. Zero
	// (or negative) means a whole Interval.
	Elapsed time.Duration
}

// Move is a range that changes owner.
type Move struct {
	Range    keyspace.Range
	From, To string
	// Load is the range's measured load.
	Load float64
	// Orphaned says From is no longer a member: the range's state is gone,
	// so this is a fresh grant, not a migration, and it is not counted as
	// churn.
	Orphaned bool
}

func (m Move) String() string {
	s := fmt.Sprintf("%v %s→%s load %g", m.Range, m.From, m.To, m.Load)
	if m.Orphaned {
		s += " (orphaned)"
	}
	return s
}

// Plan is the outcome of a round.
type Plan struct {
	// Next is the new assignment: sorted, covering the key space, with the
	// load each range is expected to carry (a split range's load is an
	// estimate; measure again before the next round). Nil when there are no
	// members.
	Next []Segment
	// Moves are the ranges of Next whose owner differs from Current, in key
	// order. Splitting and merging ranges of one owner are not moves.
	Moves []Move
	// Moved is the load of the moves that are not orphaned, as a fraction of
	// the total load; KeySpaceMoved is their share of the key space. Both
	// stay within the round's budget (Config.ChurnBudget, KeySpaceBudget).
	Moved, KeySpaceMoved float64
	// HotKeys are the keys Next holds in a one-key range of their own, with
	// their load, hottest first.
	HotKeys []HotKey
	// Splits counts the ranges of Current that were split; Merges counts the
	// ranges that disappeared by merging into a neighbour of the same owner.
	Splits, Merges int
	// Before and After are the imbalance (see Imbalance) of Current, as
	// measured, and of Next, as expected.
	Before, After float64
	// Floor is a lower bound on the imbalance of any assignment that keeps
	// the isolated hot keys whole: the hottest one on the largest member.
	// It is 1 when no single key outweighs a member's fair share.
	Floor float64
}

// Assignment returns Next as an assign.Assignment, the form the Manager's
// desired assignment takes.
func (p Plan) Assignment() assign.Assignment {
	if p.Next == nil {
		return nil
	}
	out := make(assign.Assignment, len(p.Next))
	for i, s := range p.Next {
		out[i] = assign.Segment{Range: s.Range, Owner: s.Owner}
	}
	return out
}

// Policy is a rebalancing policy: one round of load-aware rebalancing.
//
// Plan is pure and deterministic: no goroutines, clocks or randomness; the
// same Input (members in any order) gives the same Plan, so a new Manager
// leader plans what the old one would have. It does not modify in. It
// returns an error wrapping ErrInvalidInput when in is malformed.
type Policy interface {
	Plan(in Input) (Plan, error)
}

// ErrInvalidInput is wrapped by every error about a malformed Input.
var ErrInvalidInput = errors.New("rebalance: invalid input")

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("rebalance: invalid config")

// keySpace is the number of keys, 2^64.
var keySpace = math.Exp2(64)

// Imbalance returns max over members of load per unit capacity, divided by
// the mean load per unit capacity (total load over total capacity): 1 is
// perfect balance. Segments whose owner is not a member count in the total
// only. It is 1 when there is no load, and 0 when there are no members.
func Imbalance(members []assign.Member, segs []Segment) float64 {
	ms := normalize(members)
	if len(ms) == 0 {
		return 0
	}
	idx := indexOf(ms)
	loads := make([]float64, len(ms))
	var total float64
	for _, s := range segs {
		total += s.Load
		if i, ok := idx[s.Owner]; ok {
			loads[i] += s.Load
		}
	}
	return imbalance(ms, loads, total)
}

func imbalance(ms []assign.Member, loads []float64, total float64) float64 {
	if !(total > 0) {
		return 1
	}
	var capSum, worst float64
	for i, m := range ms {
		capSum += m.Capacity
		worst = max(worst, loads[i]/m.Capacity)
	}
	return worst / (total / capSum)
}

// normalize returns the members with a non-empty ID, sorted by ID, with
// every Capacity that is not a positive finite number replaced by 1, and
// duplicate IDs collapsed into the one with the largest Capacity (as
// assign's policies do).
func normalize(members []assign.Member) []assign.Member {
	out := make([]assign.Member, 0, len(members))
	for _, m := range members {
		if m.ID == "" {
			continue
		}
		if !(m.Capacity > 0) || math.IsInf(m.Capacity, 1) {
			m.Capacity = 1
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b assign.Member) int {
		if c := cmp.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return cmp.Compare(b.Capacity, a.Capacity) // largest first
	})
	return slices.CompactFunc(out, func(a, b assign.Member) bool { return a.ID == b.ID })
}

func indexOf(ms []assign.Member) map[string]int {
	idx := make(map[string]int, len(ms))
	for i, m := range ms {
		idx[m.ID] = i
	}
	return idx
}

// owner is a member during a round.
type owner struct {
	id     string
	cap    float64
	load   float64 // load of the pieces it holds now (as planned so far)
	target float64 // its fair load (see round.setTargets)
	pinned bool    // it holds a key hotter than its fair share: its target is that key
}

// util is the owner's load over its target: 1 is its fair share.
func (o *owner) util() float64 {
	if !(o.target > 0) {
		if o.load > 0 {
			return math.Inf(1)
		}
		return 1
	}
	return o.load / o.target
}

// perCap is the owner's load per unit of capacity, the quantity Imbalance
// compares.
func (o *owner) perCap() float64 { return o.load / o.cap }

// over reports whether the owner carries more than tol times its target. A
// pinned owner's target is its hot key alone: anything else it carries
// beyond slack is too much, because it adds directly to the largest load.
func (o *owner) over(tol, slack float64) bool {
	if o.pinned {
		return o.load-o.target > slack
	}
	return o.load > tol*o.target
}

// under reports whether the owner carries less than 2−tol times its target.
// A pinned owner never does.
func (o *owner) under(tol float64) bool { return !o.pinned && o.load < (2-tol)*o.target }

// piece is a range during a round.
type piece struct {
	r      keyspace.Range
	owner  int    // index into round.owners; -1 while orphaned
	from   string // its owner in Current
	load   float64
	hot    []HotKey // reported hot keys in r, by key; their loads sum to at most load
	fresh  bool     // made by a split this round (after the moves): its load is an estimate
	moved  bool     // changed owner this round
	orphan bool     // from is not a member
}

func (p *piece) oneKey() bool { return p.r.Size() == 1 }

// round is the working state of one Plan call.
type round struct {
	owners []owner
	pieces []piece // in key order
	total  float64 // total load
	before float64
}

// start validates in and builds the round. It returns nil (and no error)
// when there are no members.
func start(in Input) (*round, error) {
	ms := normalize(in.Members)
	if len(ms) == 0 {
		return nil, nil
	}
	if len(in.Current) == 0 {
		return nil, fmt.Errorf("%w: Current is empty (the first assignment comes from assign.ConsistentHash)", ErrInvalidInput)
	}
	a := make(assign.Assignment, len(in.Current))
	for i, s := range in.Current {
		if !(s.Load >= 0) || math.IsInf(s.Load, 1) {
			return nil, fmt.Errorf("%w: segment %d %v has load %g", ErrInvalidInput, i, s.Range, s.Load)
		}
		a[i] = assign.Segment{Range: s.Range, Owner: s.Owner}
	}
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("%w: Current: %w", ErrInvalidInput, err)
	}
	for _, h := range in.HotKeys {
		if !(h.Load >= 0) || math.IsInf(h.Load, 1) {
			return nil, fmt.Errorf("%w: hot key %016x has load %g", ErrInvalidInput, uint64(h.Key), h.Load)
		}
	}

	idx := indexOf(ms)
	r := &round{owners: make([]owner, len(ms)), pieces: make([]piece, len(in.Current))}
	for i, m := range ms {
		r.owners[i] = owner{id: m.ID, cap: m.Capacity}
	}
	for i, s := range in.Current {
		p := piece{r: s.Range, owner: -1, from: s.Owner, load: s.Load}
		if o, ok := idx[s.Owner]; ok {
			p.owner = o
			r.owners[o].load += s.Load
		} else {
			p.orphan = true
		}
		r.total += s.Load
		r.pieces[i] = p
	}
	r.attachHotKeys(in.HotKeys)
	loads := make([]float64, len(r.owners))
	for i := range r.owners {
		loads[i] = r.owners[i].load
	}
	r.before = imbalance(ms, loads, r.total)
	return r, nil
}

// attachHotKeys gives each piece the reported hot keys inside it. A key's
// load is capped by its piece's: when the reports of one piece add up to
// more than the piece's load, they are scaled down to it.
func (r *round) attachHotKeys(hot []HotKey) {
	hs := slices.Clone(hot)
	slices.SortFunc(hs, func(a, b HotKey) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(b.Load, a.Load)
	})
	hs = slices.CompactFunc(hs, func(a, b HotKey) bool { return a.Key == b.Key })
	j := 0
	for i := range r.pieces {
		p := &r.pieces[i]
		var sum float64
		// The pieces tile the key space in order, so each key falls in the
		// piece at hand or a later one.
		for ; j < len(hs) && p.r.Contains(hs[j].Key); j++ {
			if hs[j].Load > 0 {
				p.hot = append(p.hot, hs[j])
				sum += hs[j].Load
			}
		}
		if sum > p.load {
			for k := range p.hot {
				if p.load > 0 {
					p.hot[k].Load *= p.load / sum
				} else {
					p.hot[k].Load = 0
				}
			}
		}
	}
}

// placeOrphans gives every orphaned piece to a member at once: it is not
// churn (the state is gone whoever gets it), so no budget applies. Pieces
// with load go hottest first to the member whose load per unit capacity
// stays lowest (longest processing time first); pieces without load go
// where the key space per unit capacity stays smallest.
func (r *round) placeOrphans() {
	var hot, cold []int
	for i := range r.pieces {
		switch p := &r.pieces[i]; {
		case !p.orphan:
		case p.load > 0:
			hot = append(hot, i)
		default:
			cold = append(cold, i)
		}
	}
	if len(hot)+len(cold) == 0 {
		return
	}
	slices.SortStableFunc(hot, func(a, b int) int { return cmp.Compare(r.pieces[b].load, r.pieces[a].load) })
	for _, i := range hot {
		p := &r.pieces[i]
		best := 0
		for o := range r.owners {
			if (r.owners[o].load+p.load)/r.owners[o].cap < (r.owners[best].load+p.load)/r.owners[best].cap {
				best = o
			}
		}
		p.owner, p.moved = best, true
		r.owners[best].load += p.load
	}
	ks := make([]float64, len(r.owners))
	for i := range r.pieces {
		if p := &r.pieces[i]; p.owner >= 0 {
			ks[p.owner] += p.r.Size()
		}
	}
	for _, i := range cold {
		p := &r.pieces[i]
		best := 0
		for o := range r.owners {
			if (ks[o]+p.r.Size())/r.owners[o].cap < (ks[best]+p.r.Size())/r.owners[best].cap {
				best = o
			}
		}
		p.owner, p.moved = best, true
		ks[best] += p.r.Size()
	}
}

// move gives piece i to owner to.
func (r *round) move(i, to int) {
	p := &r.pieces[i]
	r.owners[p.owner].load -= p.load
	r.owners[to].load += p.load
	p.owner, p.moved = to, true
}

// plan turns the round into a Plan.
func (r *round) plan(splits, merges int) Plan {
	pl := Plan{
		Next:   make([]Segment, len(r.pieces)),
		Splits: splits,
		Merges: merges,
		Before: r.before,
		Floor:  1,
	}
	ms := make([]assign.Member, len(r.owners))
	loads := make([]float64, len(r.owners))
	var maxCap, capSum float64
	for i, o := range r.owners {
		ms[i] = assign.Member{ID: o.id, Capacity: o.cap}
		maxCap = max(maxCap, o.cap)
		capSum += o.cap
	}
	for i := range r.pieces {
		p := &r.pieces[i]
		id := r.owners[p.owner].id
		pl.Next[i] = Segment{Range: p.r, Owner: id, Load: p.load}
		loads[p.owner] += p.load
		if p.oneKey() && p.load > 0 {
			pl.HotKeys = append(pl.HotKeys, HotKey{Key: p.r.Start, Load: p.load})
			if r.total > 0 {
				pl.Floor = max(pl.Floor, p.load/maxCap/(r.total/capSum))
			}
		}
		if id == p.from {
			continue
		}
		pl.Moves = append(pl.Moves, Move{Range: p.r, From: p.from, To: id, Load: p.load, Orphaned: p.orphan})
		if !p.orphan {
			if r.total > 0 {
				pl.Moved += p.load / r.total
			}
			pl.KeySpaceMoved += p.r.Size() / keySpace
		}
	}
	slices.SortStableFunc(pl.HotKeys, func(a, b HotKey) int { return cmp.Compare(b.Load, a.Load) })
	pl.After = imbalance(ms, loads, r.total)
	return pl
}
