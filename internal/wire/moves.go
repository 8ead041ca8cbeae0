package wire

import (
	"fmt"
	"math"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// Conversions of the messages of planned moves, drains and load reports.

func handoversToPB(hs []protocol.Handover) []*leaseholdv1.Handover {
	var out []*leaseholdv1.Handover
	for _, h := range hs {
		out = append(out, &leaseholdv1.Handover{Range: rangeToPB(h.Range), Lgn: uint64(h.LGN), To: h.To, Addr: h.Addr,
			Incarnation: h.Incarnation, WithinNanos: int64(h.Within)})
	}
	return out
}

func handoversFromPB(where string, ms []*leaseholdv1.Handover) ([]protocol.Handover, error) {
	if len(ms) > MaxLeases {
		return nil, fmt.Errorf("%w: %s: %d handovers; at most %d allowed", ErrInvalid, where, len(ms), MaxLeases)
	}
	var out []protocol.Handover
	for i, m := range ms {
		at := fmt.Sprintf("%s[%d]", where, i)
		if m == nil {
			return nil, fmt.Errorf("%w: %s: nil handover", ErrInvalid, at)
		}
		r, err := checkMove(at, m.GetRange(), m.GetLgn(), m.GetTo(), m.GetIncarnation())
		if err != nil {
			return nil, err
		}
		if err := checkString(m.GetAddr(), false); err != nil {
			return nil, invalid(at+".addr", err)
		}
		if err := checkDuration(m.GetWithinNanos()); err != nil || m.GetWithinNanos() == 0 {
			return nil, fmt.Errorf("%w: %s.within_nanos: %d; want a positive duration", ErrInvalid, at, m.GetWithinNanos())
		}
		out = append(out, protocol.Handover{Range: r, LGN: keyspace.LGN(m.GetLgn()), To: m.GetTo(), Addr: m.GetAddr(),
			Incarnation: m.GetIncarnation(), Within: time.Duration(m.GetWithinNanos())})
	}
	return out, nil
}

// checkMove checks what a Handover and a Handed share: a valid range, an
// LGN, and the target Owner's ID and incarnation.
func checkMove(at string, pr *leaseholdv1.Range, lgn uint64, to string, inc uint64) (keyspace.Range, error) {
	r, err := rangeFromPB(pr)
	if err != nil {
		return r, fmt.Errorf("%w: %s: %v", ErrInvalid, at, err)
	}
	if lgn == 0 || to == "" || inc == 0 {
		return r, fmt.Errorf("%w: %s: a handover needs an LGN, a target owner and its incarnation", ErrInvalid, at)
	}
	if err := checkString(to, false); err != nil {
		return r, invalid(at+".to", err)
	}
	return r, nil
}

func handedToPB(hs []protocol.Handed) []*leaseholdv1.Handed {
	var out []*leaseholdv1.Handed
	for _, h := range hs {
		out = append(out, &leaseholdv1.Handed{Range: rangeToPB(h.Range), Lgn: uint64(h.LGN), To: h.To, Incarnation: h.Incarnation})
	}
	return out
}

func handedFromPB(where string, ms []*leaseholdv1.Handed) ([]protocol.Handed, error) {
	if len(ms) > MaxLeases {
		return nil, fmt.Errorf("%w: %s: %d handovers; at most %d allowed", ErrInvalid, where, len(ms), MaxLeases)
	}
	var out []protocol.Handed
	for i, m := range ms {
		at := fmt.Sprintf("%s[%d]", where, i)
		if m == nil {
			return nil, fmt.Errorf("%w: %s: nil handover", ErrInvalid, at)
		}
		r, err := checkMove(at, m.GetRange(), m.GetLgn(), m.GetTo(), m.GetIncarnation())
		if err != nil {
			return nil, err
		}
		out = append(out, protocol.Handed{Range: r, LGN: keyspace.LGN(m.GetLgn()), To: m.GetTo(), Incarnation: m.GetIncarnation()})
	}
	return out, nil
}

func loadToPB(ls []protocol.RangeLoad) []*leaseholdv1.RangeLoad {
	var out []*leaseholdv1.RangeLoad
	for _, l := range ls {
		out = append(out, &leaseholdv1.RangeLoad{Range: rangeToPB(l.Range), Requests: l.Requests})
	}
	return out
}

func loadFromPB(where string, ms []*leaseholdv1.RangeLoad) ([]protocol.RangeLoad, error) {
	if len(ms) > MaxLeases {
		return nil, fmt.Errorf("%w: %s: %d load reports; at most %d allowed", ErrInvalid, where, len(ms), MaxLeases)
	}
	var out []protocol.RangeLoad
	for i, m := range ms {
		if m == nil {
			return nil, fmt.Errorf("%w: %s[%d]: nil load report", ErrInvalid, where, i)
		}
		r, err := rangeFromPB(m.GetRange())
		if err != nil {
			return nil, fmt.Errorf("%w: %s[%d]: %v", ErrInvalid, where, i, err)
		}
		out = append(out, protocol.RangeLoad{Range: r, Requests: m.GetRequests()})
	}
	return out, nil
}

// MaxHotKeys bounds the hot keys one request may report.
const MaxHotKeys = 64

func keysToPB(ks []protocol.KeyLoad) []*leaseholdv1.KeyLoad {
	var out []*leaseholdv1.KeyLoad
	for _, k := range ks {
		out = append(out, &leaseholdv1.KeyLoad{Key: uint64(k.Key), Requests: k.Requests})
	}
	return out
}

func keysFromPB(where string, ms []*leaseholdv1.KeyLoad) ([]protocol.KeyLoad, error) {
	if len(ms) > MaxHotKeys {
		return nil, fmt.Errorf("%w: %s: %d hot keys; at most %d allowed", ErrInvalid, where, len(ms), MaxHotKeys)
	}
	var out []protocol.KeyLoad
	for i, m := range ms {
		if m == nil {
			return nil, fmt.Errorf("%w: %s[%d]: nil hot key", ErrInvalid, where, i)
		}
		out = append(out, protocol.KeyLoad{Key: keyspace.Key(m.GetKey()), Requests: m.GetRequests()})
	}
	return out, nil
}

func checkCapacity(c float64) error {
	if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || c > MaxCapacity {
		return fmt.Errorf("%v; want a finite number in [0, %d] (wire.MaxCapacity)", c, MaxCapacity)
	}
	return nil
}

func checkDrain(d uint32) error {
	if d > uint32(protocol.DrainWaiting) {
		return fmt.Errorf("%d; want 0, 1 or 2", d)
	}
	return nil
}

func rangeToPB(r keyspace.Range) *leaseholdv1.Range {
	return &leaseholdv1.Range{Start: uint64(r.Start), End: uint64(r.End)}
}
