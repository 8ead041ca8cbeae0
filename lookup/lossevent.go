package lookup

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// LossEvent is the one JSON form of a loss notification, written by
// leasehold watch --json, the gateway's /v1/losses stream (Server-Sent
// Events) and the dashboard; the gateway's gRPC LossNotification carries
// the same fields. docs/protocol.md, "Loss events", documents it:
//
//	{"event":"loss","id":7,"namespace":"default","at":"2026-11-28T13:05:01.5Z",
//	 "all":false,"ranges":[{"start":"0x…","end":"0x…"}],
//	 "owners":[{"owner":"kv-2","addr":"127.0.0.1:8002","ranges":[…]}]}
type LossEvent struct {
	Event     string     `json:"event"` // always "loss"
	ID        uint64     `json:"id"`    // numbers the writer's notifications from 1
	Namespace string     `json:"namespace"`
	At        time.Time  `json:"at"` // when the writer heard of it
	All       bool       `json:"all"`
	Ranges    []HexRange `json:"ranges"`
	// Owners names the Owners whose state was lost, each with its part of
	// Ranges: the holders in the writer's copy of the table before the
	// change. Empty when All.
	Owners []LostOwner `json:"owners"`
}

// HexRange is a range [Start, End) in 0x-hex, 16 digits; the end of the key
// space is 0x10000000000000000.
type HexRange struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// LostOwner is one Owner's part of a loss.
type LostOwner struct {
	Owner  string     `json:"owner"`
	Addr   string     `json:"addr"`
	Ranges []HexRange `json:"ranges"`
}

// NewLossEvent returns loss l of namespace ns as a LossEvent numbered id,
// heard at at.
func NewLossEvent(id uint64, ns string, at time.Time, l Loss) LossEvent {
	e := LossEvent{Event: "loss", ID: id, Namespace: ns, At: at.UTC(), All: l.All, Ranges: HexRanges(l.Ranges), Owners: []LostOwner{}}
	for _, o := range l.Owners {
		e.Owners = append(e.Owners, LostOwner{Owner: o.Owner, Addr: o.Addr, Ranges: HexRanges(o.Ranges)})
	}
	return e
}

// HexRanges returns rs as HexRanges (never nil).
func HexRanges(rs []keyspace.Range) []HexRange {
	out := make([]HexRange, 0, len(rs))
	for _, r := range rs {
		end := "0x10000000000000000"
		if r.End != 0 {
			end = fmt.Sprintf("0x%016x", uint64(r.End))
		}
		out = append(out, HexRange{Start: fmt.Sprintf("0x%016x", uint64(r.Start)), End: end})
	}
	return out
}
