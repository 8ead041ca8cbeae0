// Package wire converts between the leasehold/v1 protobuf messages (package
// leaseholdv1) and the Go types the deterministic cores exchange (packages
// protocol and leasetable).
//
// ToPB functions never fail. FromPB functions treat their input as hostile:
// they check everything a peer controls and return an error wrapping
// ErrInvalid that names the offending field, and never panic. They check
// structure only — missing or empty ranges, zero LGNs, invalid entries,
// oversized strings and lists, negative timings — and leave protocol rules
// (sequence numbers, incarnations, LSN continuity, snapshot coverage) to the
// cores, which report them in their own terms.
//
// A value that FromPB accepts converts back with ToPB to a message that
// marshals and decodes to the same value. Empty lists decode as nil slices.
package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// ErrInvalid is wrapped by every error a FromPB function returns.
var ErrInvalid = errors.New("wire: invalid message")

// Limits on what a FromPB function accepts. They bound the memory one
// message can make a receiver allocate beyond the message itself.
const (
	// MaxLeases is the most leases a LeaseRequest or LeaseResponse may list.
	MaxLeases = 1 << 16
	// MaxUpdateItems is the most changes plus segments an Update may carry.
	MaxUpdateItems = 1 << 22
	// MaxStringLen is the longest namespace, owner ID or address, in bytes.
	MaxStringLen = 1024
	// MaxCapacity is the largest Owner capacity. A capacity is a relative
	// weight (an Owner of capacity 2 gets twice the load of one of 1), and
	// consistent hashing gives an Owner 64 ring points per unit: 100 is a
	// hundredfold spread between machines in 6,400 points, where 1e6
	// reached assign's cap of 2^20 points for one Owner, which stalls the
	// leader's planning for seconds and multiplies its memory.
	MaxCapacity = 100
)

// invalid returns an error wrapping ErrInvalid: "wire: invalid message:
// <where>: <what>".
func invalid(where string, what error) error {
	return fmt.Errorf("%w: %s: %v", ErrInvalid, where, what)
}

// checkString reports why s cannot be a namespace, owner ID or address.
func checkString(s string, required bool) error {
	switch {
	case required && s == "":
		return errors.New("empty; it is required")
	case len(s) > MaxStringLen:
		return fmt.Errorf("%d bytes long; at most %d allowed", len(s), MaxStringLen)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	return nil
}

// checkDrift reports why d cannot be a MaxDrift: NaN, or outside [0, 1),
// the range protocol.Timing.Validate allows.
func checkDrift(d float64) error {
	if !(d >= 0 && d < 1) { // also rejects NaN, which compares false to everything
		return fmt.Errorf("%v; want a number in [0, 1), as Timing.MaxDrift", d)
	}
	return nil
}

// checkDuration reports why nanos cannot be a timing: negative (zero means
// "keep your own").
func checkDuration(nanos int64) error {
	if nanos < 0 {
		return fmt.Errorf("negative duration %dns", nanos)
	}
	return nil
}

func rangeFromPB(m *leaseholdv1.Range) (keyspace.Range, error) {
	if m == nil {
		return keyspace.Range{}, errors.New("missing range")
	}
	r := keyspace.Range{Start: keyspace.Key(m.GetStart()), End: keyspace.Key(m.GetEnd())}
	if !r.Valid() {
		return keyspace.Range{}, fmt.Errorf("empty range %v: start must be below end (end 0 is the end of the key space)", r)
	}
	return r, nil
}

func entryToPB(e *leasetable.Entry, m *leaseholdv1.Entry) {
	m.Owner = e.Owner
	m.Addr = e.Addr
	m.Lgn = uint64(e.LGN)
	m.Migrated = e.Migrated
	m.MigratedFrom = uint64(e.MigratedFrom)
}

func entryFromPB(m *leaseholdv1.Entry) (leasetable.Entry, error) {
	if m == nil {
		return leasetable.Entry{}, errors.New("missing entry")
	}
	if err := checkString(m.GetOwner(), false); err != nil {
		return leasetable.Entry{}, fmt.Errorf("entry owner: %v", err)
	}
	if err := checkString(m.GetAddr(), false); err != nil {
		return leasetable.Entry{}, fmt.Errorf("entry addr: %v", err)
	}
	e := leasetable.Entry{
		Owner:        m.GetOwner(),
		Addr:         m.GetAddr(),
		LGN:          keyspace.LGN(m.GetLgn()),
		Migrated:     m.GetMigrated(),
		MigratedFrom: keyspace.LGN(m.GetMigratedFrom()),
	}
	if err := e.Validate(); err != nil {
		return leasetable.Entry{}, err
	}
	return e, nil
}
