package rebalance_test

import (
	"fmt"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/rebalance"
)

func Example() {
	// Two owners; b has three times a's capacity. The key space is in eight
	// equal ranges, each measured at 10 requests/s; a holds six of them.
	members := []assign.Member{{ID: "a"}, {ID: "b", Capacity: 3}}
	var current []rebalance.Segment
	for i, s := range (assign.Fixed{Pieces: 8}).Assign([]assign.Member{{ID: "a"}}) {
		owner := "a"
		if i >= 6 {
			owner = "b"
		}
		current = append(current, rebalance.Segment{Range: s.Range, Owner: owner, Load: 10})
	}
	p, err := rebalance.Weighted(rebalance.Config{ChurnBudget: 0.5, KeySpaceBudget: 0.5})
	if err != nil {
		panic(err)
	}
	plan, err := p.Plan(rebalance.Input{Members: members, Current: current})
	if err != nil {
		panic(err)
	}
	for _, m := range plan.Moves {
		fmt.Println("move", m)
	}
	fmt.Printf("max/mean per capacity %.2f → %.2f, moved %.2f of the load\n", plan.Before, plan.After, plan.Moved)
	// Output:
	// move [0000000000000000, 2000000000000000) a→b load 10
	// move [2000000000000000, 4000000000000000) a→b load 10
	// move [4000000000000000, 6000000000000000) a→b load 10
	// move [6000000000000000, 8000000000000000) a→b load 10
	// max/mean per capacity 3.00 → 1.00, moved 0.50 of the load
}
