// Package rebalance is leasehold's load-aware rebalancer: a pure,
// deterministic function that the Manager runs every few seconds to move
// ranges from overloaded owners to underloaded ones, within a budget of churn
// per round, honouring owner capacities and isolating single hot keys.
//
// # Why
//
// Consistent hashing (package assign) balances key space, not load. With a
// skewed workload — PRS measured Zipf(0.8) key popularity (P§7.3) — the
// owners that happen to hold the popular keys run far above the mean.
// Centrifuge's adaptive load management (C§2.1.2) moves one virtual node per
// round from every owner more than 10% above the mean load to the least
// loaded owner. It works, slowly: in PRS's Figure 10 the servers above the
// threshold only dwindle "over the course of the hour". One virtual node per
// round is a fixed, small step whatever the excess; a virtual node holding a
// hot key can never be divided; and nothing bounds how much state a round
// moves.
//
// Slicer (Adya et al., OSDI 2016) showed the better shape: ranges ("slices")
// that split when hot and merge when cold, and a "weighted move" step that
// takes the moves that remove the most imbalance per unit of key churn,
// until a churn budget for the round is spent. Porcupine (TOCS 2000) adds
// heterogeneity: a faster node should simply get proportionally more work,
// with no per-node tuning. Weighted is that design on leasehold's ranges;
// Centrifuge is the paper's rule, kept as a baseline so both can be run side
// by side on the same input.
//
// # What a round of Weighted does
//
//  1. Orphans. A range whose owner is no longer a member is given to a member
//     at once, hottest first to the member with the lowest load per unit of
//     capacity. Its state is gone anyway, so this is not churn and no budget
//     applies; such moves are marked Orphaned.
//  2. Fair shares. A member's fair load is its capacity times the level, total
//     load over total capacity. A member that holds an isolated key hotter
//     than its fair share is pinned: no assignment can bring it below that
//     key, so its fair load is the key alone, it sheds everything else and
//     receives nothing, and the level is recomputed over the other members.
//  3. Hysteresis. The round acts only if some member is above Tolerance
//     (1.10) times its fair load, or below 2−Tolerance, and then aims at
//     Target (1.05). Measurement noise smaller than the gap moves nothing.
//  4. Weighted move. While some member is over Target, the one with the
//     largest load per unit of capacity sheds a range: of all moves that
//     lower the larger per-capacity load of the two members, the one with the
//     largest fall of Φ = Σ capacity·(load/capacity − mean)² per unit of
//     budget it uses is made. A member under 2−Target (say, a new one)
//     receives the same way. The budget per round is ChurnBudget of the total
//     load, KeySpaceBudget of the key space and MaxMoves ranges, scaled down
//     when rounds come faster than Interval (Input.Elapsed). Only whole,
//     measured ranges move, so the budget holds against real loads.
//  5. Split. A range carrying more than SplitLoad (5% of a unit member's
//     fair load) on a member still over Target is split into parts of equal
//     estimated load, ready for the next round; a reported hot key above
//     SplitLoad gets the one-key range [k, k+1) and is reported in
//     Plan.HotKeys. Within a range, load is estimated as the reported hot
//     keys plus the rest spread evenly over the other keys; the next round
//     measures the parts.
//  6. Merge. Adjacent ranges of one member whose loads add up to at most
//     MergeLoad merge, so that the table stays small.
//
// # Measured
//
// From the tests (go test -run Experiment -v prints every round; add
// -matrix for more skews and cluster sizes). Owners of equal capacity start
// from consistent hashing with 64 virtual nodes; 1M keys of Zipf(0.8)
// popularity; one round every 5 s of simulated time:
//
//   - 10 owners. Weighted: max/mean 1.27 → 1.045 in the first round (17
//     moves: 3.1% of the load, 2.9% of the key space), then no moves.
//     Centrifuge: 1.088 after 9 rounds (45 s), moving 0.2–0.4% of the load
//     per round.
//   - 50 owners: Weighted 1.60 → 1.04 in one round; Centrifuge reaches 1.10
//     after 21 rounds. 100 owners, where the hottest key alone is 1.34 times
//     an owner's fair share: Weighted 2.34 → 1.36 → 1.34 (the floor) in two
//     rounds; Centrifuge is at 1.70 after 24. With Zipf(1.0) and 10 owners
//     Centrifuge is still at 1.18 after 24 rounds; Weighted is at 1.05 after
//     one. The same holds without hot-key reports.
//   - Capacities 1, 1, 2, 4: load per unit of capacity 0.95–1.14 of the mean
//     → 0.97–1.04 in one round.
//   - One key with 30% of the load among 10 owners: isolated and pinned in
//     the first round (which spends the whole key-space budget), alone on
//     its owner from the second, so max/mean is the floor 3.0 (0.30 over a
//     mean of 0.10) and the other nine owners carry 0.99–1.04 of their share
//     of the remaining 70%. Centrifuge is at 3.39 after 12 rounds.
//   - With every range's measurement off by up to ±10% each round, a
//     balanced table makes no moves in 50 rounds.
//   - One Plan over 100 owners × 64 ranges takes about 7 ms when it has much
//     to move and 0.7 ms when balanced (BenchmarkWeightedPlan*).
//
// # Usage
//
// The Manager's leader calls Plan every Config.Interval (5 s) per namespace:
//
//	p, err := rebalance.Weighted(rebalance.Config{}) // the defaults
//	...
//	plan, err := p.Plan(rebalance.Input{
//		Members: members,  // live owners, with capacities
//		Current: segments, // the desired assignment now, with the load of each range
//		HotKeys: hot,      // the owners' hottest keys
//		Elapsed: now.Sub(lastPlan),
//	})
//	desired = plan.Assignment()
//
// The caller's duties:
//
//   - Current is the desired assignment (the previous round's Next), not the
//     lease table, which lags behind it while moves are in flight. Load is a
//     property of a range, not of its owner, so a range's measurement stays
//     valid while it moves.
//   - Segment.Load is the request rate on the range over the last window
//     (about one Interval; longer windows smooth noise). Owners count
//     requests per leased range and report the counts; the Manager sums them
//     per range. Any unit works as long as it is the same for every range.
//   - HotKeys come from the owners: each keeps a small top-k sketch of its
//     keys (k ≈ 8–32, e.g. space-saving) and reports the keys with their
//     rates. Without reports a hot range is still split, by key space, round
//     after round; it takes longer to isolate a single key that way.
//   - Elapsed is the time since the previous plan was issued, so that
//     calling Plan more often than Interval never moves load faster than
//     the configured rate; zero means one Interval.
//   - A Move that is not Orphaned is a planned migration (C§2.1.2): recall
//     the range from From, grant it to To, with the migrated flag when From
//     handed over its state. An Orphaned move is a fresh grant of a range
//     whose state is lost. Splitting and merging ranges of one owner change
//     no key's owner and are not moves.
//   - The plan depends on loads that only the leader measured, so the
//     desired assignment it produces is no longer a function of membership
//     alone: it must be replicated with the rest of the Manager's state for a
//     new leader to carry on from it.
//   - A membership change need not wait for a round: calling Plan then
//     places the orphans at once and starts filling a new member within the
//     budget.
//
// Plan is pure: it starts no goroutines, reads no clock, draws no random
// numbers and does not modify its input; the same Input, with members in any
// order, gives the same Plan, so a new leader plans exactly what the old one
// would have from the same measurements.
package rebalance
