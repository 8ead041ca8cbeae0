package assign_test

import (
	"fmt"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
)

func Example() {
	members := []assign.Member{
		{ID: "owner-a"},
		{ID: "owner-b"},
		{ID: "owner-c", Capacity: 2}, // twice the virtual nodes
	}
	a := assign.ConsistentHash{}.Assign(members) // 64 virtual nodes per unit of capacity
	if err := a.Validate(); err != nil {
		panic(err)
	}
	perOwner := map[string]int{}
	for _, s := range a {
		perOwner[s.Owner]++
	}
	fmt.Println("segments:", len(a), perOwner)
	fmt.Println("alice is served by", a.Owner(keyspace.KeyOf("alice")))
	// Output:
	// segments: 256 map[owner-a:64 owner-b:64 owner-c:128]
	// alice is served by owner-c
}

func ExampleFixed() {
	a := assign.Fixed{Pieces: 4}.Assign([]assign.Member{{ID: "b"}, {ID: "a"}})
	for _, s := range a {
		fmt.Println(s.Range, s.Owner)
	}
	// Output:
	// [0000000000000000, 4000000000000000) a
	// [4000000000000000, 8000000000000000) b
	// [8000000000000000, c000000000000000) a
	// [c000000000000000, end) b
}
