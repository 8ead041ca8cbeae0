// The golden command "request": an Owner's lease request.

package lease

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

func (g *golden) owner(id string) *goldenOwner {
	o := g.owners[id]
	if o == nil {
		o = &goldenOwner{id: id, inc: 1}
		g.owners[id] = o
	}
	return o
}

func (g *golden) request(t *testing.T, d *datadriven.TestData) {
	t.Helper()
	o := g.owner(g.arg(t, d, "owner"))
	req := &protocol.LeaseRequest{
		Namespace: protocol.DefaultNamespace, Owner: o.id, Addr: o.id + ":7000", Incarnation: o.inc,
		Seq: o.seq + 1, AckEpoch: o.epoch, AckSeq: o.heard, Held: slices.Clone(o.held), Zone: o.zone,
	}
	for _, a := range d.CmdArgs {
		var err error
		switch a.Key {
		case "owner":
		case "seq":
			req.Seq, err = g.parseSeq(a.SingleVal(t))
		case "ack":
			req.AckSeq, err = g.parseSeq(a.SingleVal(t))
		case "inc":
			req.Incarnation, err = strconv.ParseUint(a.SingleVal(t), 10, 64)
		case "held":
			req.Held = nil
			for _, v := range a.Vals {
				if v == "" {
					continue
				}
				l, err := parseLease(v)
				if err != nil {
					d.Fatalf(t, "held: %v", err)
				}
				req.Held = append(req.Held, l)
			}
		case "compact":
			req.HeldAsAcked, req.Held = true, nil
		case "leaving":
			req.Leaving = true
		case "draining":
			req.Draining = true
		case "zone":
			req.Zone = a.SingleVal(t)
			o.zone = req.Zone
		case "insync":
			for _, v := range a.Vals {
				lgn, sgn, ok := strings.Cut(v, "/")
				l, err1 := strconv.ParseUint(lgn, 10, 64)
				s, err2 := strconv.ParseUint(sgn, 10, 64)
				if !ok || err1 != nil || err2 != nil {
					d.Fatalf(t, "insync: %q is not LGN/SGN", v)
				}
				req.InSync = append(req.InSync, protocol.StandbySync{Range: keyspace.Full, LGN: keyspace.LGN(l), SGN: protocol.SGN(s)})
			}
		case "handed":
			for _, v := range a.Vals {
				lease, to, ok := strings.Cut(v, ">")
				if !ok {
					d.Fatalf(t, "handed: %q is not LEASE>OWNER", v)
				}
				l, err := parseLease(lease)
				if err != nil {
					d.Fatalf(t, "handed: %v", err)
				}
				req.Handed = append(req.Handed, protocol.Handed{Range: l.Range, LGN: l.LGN, To: to, Incarnation: g.owner(to).inc})
			}
		default:
			d.Fatalf(t, "request: unknown argument %q", a.Key)
		}
		if err != nil {
			d.Fatalf(t, "request %s: %v", a.Key, err)
		}
	}
	if req.Incarnation == o.inc {
		o.seq = max(o.seq, req.Seq)
		if o.sent == nil {
			o.sent = map[uint64][]protocol.Lease{}
		}
		held := req.Held
		if req.HeldAsAcked {
			held = o.held // what the Owner holds, which the flag stands for
		}
		o.sent[req.Seq] = slices.Clone(held)
	}
	g.printf("%s → M  %s\n", o.id, g.describeRequest(req))
	if err := g.c.StepLease(g.at(), req); err != nil {
		g.printf("error: %v\n", err)
	}
}

func (g *golden) describeRequest(req *protocol.LeaseRequest) string {
	var b strings.Builder
	if req.Incarnation != 1 || g.owner(req.Owner).inc != 1 {
		fmt.Fprintf(&b, "inc=%d ", req.Incarnation)
	}
	fmt.Fprintf(&b, "seq=%s ack=%s", g.seqString(req.Seq), g.seqString(req.AckSeq))
	if req.HeldAsAcked {
		b.WriteString(" HeldAsAcked")
	} else {
		fmt.Fprintf(&b, " held=(%s)", leaseList(req.Held, false))
	}
	for _, h := range req.Handed {
		fmt.Fprintf(&b, " handed %s#%d to %s", rangeString(h.Range), h.LGN, h.To)
	}
	if req.Leaving {
		b.WriteString(" leaving")
	}
	if req.Draining {
		b.WriteString(" draining")
	}
	if req.Zone != "" {
		fmt.Fprintf(&b, " zone=%s", req.Zone)
	}
	for _, s := range req.InSync {
		fmt.Fprintf(&b, " in-sync #%d/s%d", s.LGN, s.SGN)
	}
	return b.String()
}
