package cli

import (
	"slices"
	"testing"

	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func TestReadLeaseHoldersFlag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		all     bool
		holders []uint64
		bad     bool
	}{
		{in: "all", all: true},
		{in: "none"},
		{in: "1,3", holders: []uint64{1, 3}},
		{in: "0", bad: true},
		{in: "1,x", bad: true},
	} {
		var l manager.ReadLease
		err := holdersFlag{&l}.Set(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("%q: error %v, want error %v", tc.in, err, tc.bad)
			continue
		}
		if tc.bad {
			continue
		}
		if l.All != tc.all || !slices.Equal(l.Holders, tc.holders) {
			t.Errorf("%q: got all=%v holders=%v", tc.in, l.All, l.Holders)
		}
		if got := (holdersFlag{&l}).String(); got != tc.in {
			t.Errorf("%q prints as %q", tc.in, got)
		}
	}
}

func TestReadLeaseText(t *testing.T) {
	for _, tc := range []struct {
		l    *pb.ReadLeaseInfo
		want string
	}{
		{nil, "-"},
		{&pb.ReadLeaseInfo{}, "-"},
		{&pb.ReadLeaseInfo{Holder: true}, "none"},
		{&pb.ReadLeaseInfo{Holder: true, Serving: true, RemainingMs: 180}, "serving (180ms left)"},
		{&pb.ReadLeaseInfo{Holder: true, RemainingMs: 90}, "held, write pending (90ms left)"},
	} {
		if got := readLeaseText(tc.l); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.l, got, tc.want)
		}
	}
}
