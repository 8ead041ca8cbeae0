package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// TestStandbyRoundTrip: the standby fields (docs/design.md rules 21-24)
// survive the wire, in both directions.
func TestStandbyRoundTrip(t *testing.T) {
	r := keyspace.Range{Start: 10, End: 20}
	req := &protocol.LeaseRequest{Namespace: "ns", Owner: "o", Incarnation: 1, Seq: 1, Zone: "zone-a",
		InSync: []protocol.StandbySync{{Range: r, LGN: 4, SGN: 7}}}
	if got := roundTrip(t, req, LeaseRequestToPB, LeaseRequestFromPB); !reflect.DeepEqual(got, req) {
		t.Errorf("request: got %+v, want %+v", got, req)
	}
	resp := &protocol.LeaseResponse{Namespace: "ns", Owner: "o", Incarnation: 1, Epoch: 1, Seq: 2,
		Leases:     []protocol.Lease{{Range: r, LGN: 9, Grant: true, Migrated: true, Promoted: true}},
		Standbys:   []protocol.Standby{{Range: r, LGN: 9, SGN: 8, Owner: "s", Addr: "s:1", Incarnation: 3, InSync: true}, {Range: r, LGN: 9, SGN: 9}},
		StandbyFor: []protocol.Standby{{Range: r, LGN: 5, SGN: 6, Owner: "h", Addr: "h:1", Incarnation: 2}}}
	if got := roundTrip(t, resp, LeaseResponseToPB, LeaseResponseFromPB); !reflect.DeepEqual(got, resp) {
		t.Errorf("response: got %+v, want %+v", got, resp)
	}
}

// TestStandbyRejects: a zone past protocol.MaxZoneLen, and a pairing or
// a report without an LGN or an SGN, are refused with the field named.
func TestStandbyRejects(t *testing.T) {
	long := &leaseholdv1.LeaseRequest{Namespace: "ns", Zone: strings.Repeat("z", protocol.MaxZoneLen+1)}
	if _, err := LeaseRequestFromPB(long); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "zone") ||
		!strings.Contains(err.Error(), "MaxZoneLen") {
		t.Errorf("zone too long: %v", err)
	}
	noSGN := &leaseholdv1.LeaseRequest{Namespace: "ns", InSync: []*leaseholdv1.StandbySync{{Range: pbRange(0, 0), Lgn: 1}}}
	if _, err := LeaseRequestFromPB(noSGN); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "in_sync[0]") {
		t.Errorf("report without SGN: %v", err)
	}
	noLGN := &leaseholdv1.LeaseResponse{StandbyFor: []*leaseholdv1.Standby{{Range: pbRange(0, 0), Sgn: 1}}}
	if _, err := LeaseResponseFromPB(noLGN); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "standby_for[0]") {
		t.Errorf("pairing without LGN: %v", err)
	}
}

// TestStandbyNamesOnce: a request that leaves its names out still carries
// its zone and in-sync reports.
func TestStandbyNamesOnce(t *testing.T) {
	var c OwnerNames
	m := &leaseholdv1.LeaseRequest{Namespace: "ns", Owner: "o", Addr: "a", Zone: "z",
		InSync: []*leaseholdv1.StandbySync{{Range: pbRange(0, 0), Lgn: 1, Sgn: 2}}}
	c.Send(m)
	c.Recv(&leaseholdv1.LeaseResponse{NamesOnce: true, Owner: "o"})
	got := c.Send(m)
	if got.GetOwner() != "" || got.GetZone() != "z" || len(got.GetInSync()) != 1 {
		t.Errorf("compact request: %v", got)
	}
}
