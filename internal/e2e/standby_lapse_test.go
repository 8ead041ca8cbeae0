package e2e

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// A live Owner starved of CPU (the machine is shared; pinned to one core,
// nine processes share it) can fail to renew for a whole owner lease: its
// lease runs out on its side, and it says so on stderr ("owner: leases ran
// out before a renewal reached this Owner", with its stream's last answer
// in order). What it held goes to the standbys in sync (docs/design.md rule
// 21); what had none in sync — its standby among the Owners just killed,
// or one being filled anew — is lost, and notified. That loss is outside
// each step's premise (the Owners not killed keep their leases), so the
// steps excuse a notification only with that evidence: it names a live
// Owner that logged its own lease's lapse within an owner lease before the
// notification. Every other notification fails the step, and the excused
// ones are logged with the Owner's own line.

const lapseLine = "owner: leases ran out before a renewal reached this Owner"

// ownerLoss is one Owner's part of a loss notification watch printed.
type ownerLoss struct {
	at     time.Time
	owner  string
	ranges []keyspace.Range
}

// ownerLosses returns the loss notifications printed after from, per Owner
// named.
func (sc *sbCluster) ownerLosses(from time.Time) []ownerLoss {
	lines, _ := sc.w.p.snapshot()
	var out []ownerLoss
	for _, l := range lines {
		if !l.at.After(from) {
			continue
		}
		var ev struct {
			Event  string `json:"event"`
			Owners []struct {
				Owner  string `json:"owner"`
				Ranges []struct {
					Start string `json:"start"`
					End   string `json:"end"`
				} `json:"ranges"`
			} `json:"owners"`
		}
		if json.Unmarshal([]byte(l.text), &ev) != nil || ev.Event != "loss" {
			continue
		}
		for _, o := range ev.Owners {
			ol := ownerLoss{at: l.at, owner: o.Owner}
			for _, r := range o.Ranges {
				ol.ranges = append(ol.ranges, keyspace.Range{Start: hexKey(r.Start), End: hexKey(r.End)})
			}
			out = append(out, ol)
		}
	}
	return out
}

// lapsed returns the line in which Owner id, not killed, logged its own
// lease's lapse within an owner lease (and slack) before at, if it did.
func (sc *sbCluster) lapsed(id string, at time.Time) (string, bool) {
	p := sc.servers[id]
	if p == nil || sc.killed[id] {
		return "", false
	}
	window := protocol.Fast().OwnerLease + slack
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if !strings.Contains(line, lapseLine) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err == nil && !t.Before(at.Add(-window)) && !t.After(at.Add(quiet)) {
			return line, true
		}
	}
	return "", false
}

// excusedLoss is a live Owner's part of a notification, with the line in
// which it logged its own lease's lapse.
type excusedLoss struct {
	ownerLoss
	line string
}

// splitLosses splits the notifications printed after from into those
// excused (a live Owner's own lapse, with its evidence) and the others,
// which the step must not have.
func (sc *sbCluster) splitLosses(from time.Time) (excused []excusedLoss, others []ownerLoss) {
	for _, l := range sc.ownerLosses(from) {
		if line, ok := sc.lapsed(l.owner, l.at); ok {
			excused = append(excused, excusedLoss{l, line})
			continue
		}
		others = append(others, l)
	}
	return excused, others
}

// logExcused logs each excused notification beside its Owner's line.
func (sc *sbCluster) logExcused(excused []excusedLoss) {
	for _, e := range excused {
		sc.t.Logf("a loss notification at %s for %d ranges of %s, alive, excused: its own lease ran out first: %s",
			e.at.Format("15:04:05.000"), len(e.ranges), e.owner, e.line)
	}
}

// rangesOf returns the ranges of the excused notifications.
func rangesOf(excused []excusedLoss) []keyspace.Range {
	var out []keyspace.Range
	for _, e := range excused {
		out = append(out, e.ranges...)
	}
	return out
}
