package rebalance

import (
	"fmt"
	"math"
	"time"
)

// Config tunes Weighted. The zero value of every field means its default;
// DefaultConfig spells them out.
type Config struct {
	// Tolerance is the imbalance a round puts up with: a round acts only
	// when some member's load exceeds Tolerance times its fair share, or
	// falls below 2−Tolerance times it. Default 1.10.
	Tolerance float64
	// Target is where a round that acts aims: it moves load until every
	// member is within Target (and 2−Target) of its fair share, or the
	// budget runs out. Target < Tolerance is the hysteresis that keeps a
	// balanced system still when measurements wobble by less than the gap.
	// Default 1 + (Tolerance−1)/2 (1.05).
	Target float64

	// Interval is how often the caller plans a round; the budgets below are
	// per Interval (see Input.Elapsed). Default 5 s.
	Interval time.Duration
	// ChurnBudget is the largest fraction of the total load a round may
	// move (requests whose owner changes). Default 0.10.
	ChurnBudget float64
	// KeySpaceBudget is the largest fraction of the key space a round may
	// move (keys whose state changes hands). Default 0.10.
	KeySpaceBudget float64
	// MaxMoves is the largest number of ranges a round may move (each is a
	// recall and a grant, C§2.3.2). Default 64.
	MaxMoves int

	// SplitLoad is the load above which a range of an overloaded member is
	// split, as a fraction of the fair load of a member of capacity 1. A
	// reported hot key above it gets a range of its own. Default 0.05: a
	// range then moves at most a twentieth of a member's load, finer than the
	// band between Target and 1.
	SplitLoad float64
	// MergeLoad is the load at or below which adjacent ranges of one member
	// merge, in the unit of SplitLoad. It must be at most SplitLoad/2, so
	// that the halves of a split never merge back. Default SplitLoad/4.
	MergeLoad float64
	// MaxSegmentsPerOwner bounds the table: splits stop at
	// MaxSegmentsPerOwner × members ranges. Default 256.
	MaxSegmentsPerOwner int
}

// DefaultConfig returns the defaults of every field.
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	if c.Tolerance == 0 {
		c.Tolerance = 1.10
	}
	if c.Target == 0 {
		c.Target = 1 + (c.Tolerance-1)/2
	}
	if c.Interval == 0 {
		c.Interval = 5 * time.Second
	}
	if c.ChurnBudget == 0 {
		c.ChurnBudget = 0.10
	}
	if c.KeySpaceBudget == 0 {
		c.KeySpaceBudget = 0.10
	}
	if c.MaxMoves == 0 {
		c.MaxMoves = 64
	}
	if c.SplitLoad == 0 {
		c.SplitLoad = 0.05
	}
	if c.MergeLoad == 0 {
		c.MergeLoad = c.SplitLoad / 4
	}
	if c.MaxSegmentsPerOwner == 0 {
		c.MaxSegmentsPerOwner = 256
	}
	return c
}

// Validate checks the config, with defaults applied to its zero fields. The
// error names the first bad field and wraps ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(c.Tolerance) || c.Tolerance <= 1 || c.Tolerance >= 2:
		return bad("Tolerance (%g) must be above 1 and below 2", c.Tolerance)
	case !finite(c.Target) || c.Target < 1 || c.Target > c.Tolerance:
		return bad("Target (%g) must be at least 1 and at most Tolerance (%g)", c.Target, c.Tolerance)
	case c.Interval < 0:
		return bad("Interval (%v) cannot be negative", c.Interval)
	case !(c.ChurnBudget > 0 && c.ChurnBudget <= 1):
		return bad("ChurnBudget (%g) must be in (0, 1]", c.ChurnBudget)
	case !(c.KeySpaceBudget > 0 && c.KeySpaceBudget <= 1):
		return bad("KeySpaceBudget (%g) must be in (0, 1]", c.KeySpaceBudget)
	case c.MaxMoves < 0:
		return bad("MaxMoves (%d) cannot be negative", c.MaxMoves)
	case !finite(c.SplitLoad) || c.SplitLoad <= 0:
		return bad("SplitLoad (%g) must be positive", c.SplitLoad)
	case !finite(c.MergeLoad) || c.MergeLoad < 0 || c.MergeLoad > c.SplitLoad/2:
		return bad("MergeLoad (%g) must be in [0, SplitLoad/2 = %g]", c.MergeLoad, c.SplitLoad/2)
	case c.MaxSegmentsPerOwner < 0:
		return bad("MaxSegmentsPerOwner (%d) cannot be negative", c.MaxSegmentsPerOwner)
	}
	return nil
}

// budget is what one round may still move.
type budget struct {
	load, keys float64 // fractions of the total load and of the key space
	moves      int
	// full is one whole Interval's budget, the yardstick of a move's cost.
	fullLoad, fullKeys float64
	fullMoves          int
}

// budgetFor scales the config's per-Interval budget by elapsed/Interval,
// capped at one Interval.
func (c Config) budgetFor(elapsed time.Duration) budget {
	f := 1.0
	if elapsed > 0 && elapsed < c.Interval {
		f = float64(elapsed) / float64(c.Interval)
	}
	return budget{
		load:      c.ChurnBudget * f,
		keys:      c.KeySpaceBudget * f,
		moves:     int(float64(c.MaxMoves) * f),
		fullLoad:  c.ChurnBudget,
		fullKeys:  c.KeySpaceBudget,
		fullMoves: max(c.MaxMoves, 1),
	}
}
