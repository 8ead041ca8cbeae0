package dashboard

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
)

// What the dashboard shows an operator first: the losses, counted and
// listed apart from the timeline, each with the Owners whose state was lost
// (the loss schema, lookup.LossEvent); planned moves as one line per move;
// and, for the key search, since when each lease has been held.

// lossesKept is how many loss events a view lists, the newest first.
const lossesKept = 100

// moveWindow is how long a planned move's line stays open: the ranges
// moved from one Owner to another within it of the line's last range are
// counted on that line.
const moveWindow = 5 * time.Second

// opState is the Hub's state for the above, guarded by Hub.mu.
type opState struct {
	losses    []lookup.LossEvent // the newest lossesKept, oldest first
	lossCount uint64             // loss notifications since the dashboard started
	moves     map[moveKey]openMove
	// since is, per namespace, when the dashboard saw each lease of the
	// table granted (by LGN); a lease in its first copy of the table is
	// stamped with that copy's time and marked so.
	since map[string]map[keyspace.LGN]granted
}

type moveKey struct{ ns, from, to string }

type openMove struct {
	seq      uint64 // the timeline event
	last     time.Time
	count    int
	from, to keyspace.LSN
}

type granted struct {
	at       time.Time
	lsn      keyspace.LSN
	snapshot bool // seen first in a full copy: held since that time or before
}

// lossLocked records loss l of namespace ns: counted, listed with its
// Owners (from the Lookup, or, when it names none, from the table as last
// drawn), and returned for the timeline's line.
func (h *Hub) lossLocked(ns string, l lookup.Loss) lookup.LossEvent {
	if len(l.Owners) == 0 && !l.All {
		l.Owners = ownersOf(h.drawn[ns].segs, l.Ranges)
	}
	h.op.lossCount++
	e := lookup.NewLossEvent(h.op.lossCount, ns, h.cfg.Now(), l)
	h.op.losses = append(h.op.losses, e)
	if over := len(h.op.losses) - lossesKept; over > 0 {
		h.op.losses = slices.Delete(h.op.losses, 0, over)
	}
	return e
}

// ownersOf groups rs by the holders of segs (sorted), for a loss whose
// Lookup did not name them.
func ownersOf(segs []leasetable.Segment, rs []keyspace.Range) []leasetable.OwnerRanges {
	by := map[string]*leasetable.OwnerRanges{}
	for _, r := range rs {
		for _, s := range overlapping(segs, r) {
			p, ok := s.Range.Intersect(r)
			if !ok || s.Entry.Owner == "" {
				continue
			}
			o := by[s.Entry.Owner]
			if o == nil {
				o = &leasetable.OwnerRanges{Owner: s.Entry.Owner, Addr: s.Entry.Addr}
				by[s.Entry.Owner] = o
			}
			o.Ranges = append(o.Ranges, p)
		}
	}
	out := make([]leasetable.OwnerRanges, 0, len(by))
	for _, o := range by {
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b leasetable.OwnerRanges) int { return cmp.Compare(a.Owner, b.Owner) })
	return out
}

// lossText is a loss's timeline line.
func lossText(e lookup.LossEvent) (string, []string) {
	owners := []string{}
	var held []string
	for _, o := range e.Owners {
		owners = append(owners, o.Owner)
		held = append(held, fmt.Sprintf("%s (%d)", o.Owner, len(o.Ranges)))
	}
	text := fmt.Sprintf("LOSS of %d ranges", len(e.Ranges))
	if len(held) > 0 {
		text += " held by " + strings.Join(held, ", ")
	}
	var spans []string
	for i, r := range e.Ranges {
		if i == lossShown {
			spans = append(spans, "…")
			break
		}
		spans = append(spans, "["+r.Start+", "+r.End+")")
	}
	return text + ": " + strings.Join(spans, " "), owners
}

// moveLocked puts planned move c (a grant that migrated from's state) on
// the timeline: on the line of the move from from to c's Owner if one is
// open, else on a new one.
func (h *Hub) moveLocked(ns, from string, c leasetable.Change) {
	now := h.cfg.Now()
	k := moveKey{ns, from, c.Entry.Owner}
	if h.op.moves == nil {
		h.op.moves = map[moveKey]openMove{}
	}
	m, ok := h.op.moves[k]
	if ok && now.Sub(m.last) < moveWindow {
		if i := h.eventIndexLocked(m.seq); i >= 0 {
			m.last, m.count, m.to = now, m.count+1, c.LSN
			h.op.moves[k] = m
			h.events[i].Count = m.count
			h.events[i].Text = moveText(k, m)
			return
		}
	}
	for key, old := range h.op.moves {
		if now.Sub(old.last) >= moveWindow {
			delete(h.op.moves, key) // closed
		}
	}
	m = openMove{last: now, count: 1, from: c.LSN, to: c.LSN}
	owners := []string{c.Entry.Owner}
	if from != c.Entry.Owner && from != "free" {
		owners = append(owners, from)
	}
	h.eventLocked(ns, "move", owners, moveText(k, m))
	m.seq = h.seq
	h.events[len(h.events)-1].Count = 1
	h.op.moves[k] = m
}

func moveText(k moveKey, m openMove) string {
	lsn := fmt.Sprintf("lsn %d", m.from)
	if m.to != m.from {
		lsn = fmt.Sprintf("lsn %d–%d", m.from, m.to)
	}
	ranges := "1 range"
	if m.count != 1 {
		ranges = fmt.Sprintf("%d ranges", m.count)
	}
	return fmt.Sprintf("planned move %s → %s: %s (%s), the state moved with them", k.from, k.to, ranges, lsn)
}

// eventIndexLocked returns the index in h.events of the event numbered
// seq, or -1 once it is no longer kept.
func (h *Hub) eventIndexLocked(seq uint64) int {
	if len(h.events) == 0 || seq < h.events[0].Seq {
		return -1
	}
	i := int(seq - h.events[0].Seq)
	if i >= len(h.events) || h.events[i].Seq != seq {
		return -1
	}
	return i
}

// grantedLocked notes when the leases of update u of namespace ns were
// seen granted.
func (h *Hub) grantedLocked(ns string, u lookup.Update) {
	if h.op.since == nil {
		h.op.since = map[string]map[keyspace.LGN]granted{}
	}
	m := h.op.since[ns]
	if m == nil {
		m = map[keyspace.LGN]granted{}
		h.op.since[ns] = m
	}
	now := h.cfg.Now()
	for _, s := range u.Update.Segments {
		if _, ok := m[s.Entry.LGN]; !ok && s.Entry.LGN != 0 {
			m[s.Entry.LGN] = granted{at: now, lsn: u.Update.To, snapshot: true}
		}
	}
	for _, c := range u.Update.Changes {
		if _, ok := m[c.Entry.LGN]; !ok && c.Entry.LGN != 0 {
			m[c.Entry.LGN] = granted{at: now, lsn: c.LSN}
		}
	}
}

// pruneGrantedLocked forgets the leases no longer in the tables drawn,
// once a namespace's map holds twice as many leases as its table has
// ranges: a walk of the table per view would cost as much as the view.
func (h *Hub) pruneGrantedLocked(fresh map[string]drawn) {
	for ns, m := range h.op.since {
		d, ok := fresh[ns]
		if !ok {
			delete(h.op.since, ns)
			continue
		}
		if len(m) <= 2*len(d.segs)+64 {
			continue
		}
		live := make(map[keyspace.LGN]bool, len(d.segs))
		for _, s := range d.segs {
			live[s.Entry.LGN] = true
		}
		for lgn := range m {
			if !live[lgn] {
				delete(m, lgn)
			}
		}
	}
}

// keyAnswer is the key search's answer: which Owner holds the key, since
// when (as the dashboard saw it).
type keyAnswer struct {
	Key       string `json:"key"`
	Hash      string `json:"hash"`
	Namespace string `json:"namespace"`
	Start     string `json:"start"`
	End       string `json:"end"`
	Owner     string `json:"owner"` // "" when free
	Addr      string `json:"addr"`
	LGN       uint64 `json:"lgn"`
	Migrated  bool   `json:"migrated"`
	Since     string `json:"since"` // RFC 3339, when the dashboard saw the lease granted; "" when not known
	SinceLSN  uint64 `json:"sinceLsn"`
	// SinceCopy says the lease was in the dashboard's first copy of the
	// table: it has been held since Since or before.
	SinceCopy bool   `json:"sinceCopy"`
	LSN       uint64 `json:"lsn"` // the table drawn
	Text      string `json:"text"`
}

// holderOf answers the key search for key in namespace ns.
func (h *Hub) holderOf(ns, key string) (keyAnswer, bool) {
	k := keyspace.KeyOf(key)
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.drawn[ns]
	if !ok {
		return keyAnswer{}, false
	}
	s, ok := segmentAt(d.segs, k)
	if !ok {
		return keyAnswer{}, false
	}
	a := keyAnswer{Key: key, Hash: hexKey(k), Namespace: ns, Start: hexKey(s.Range.Start), End: hexEnd(s.Range),
		Owner: s.Entry.Owner, Addr: s.Entry.Addr, LGN: uint64(s.Entry.LGN), Migrated: s.Entry.Migrated, LSN: uint64(d.lsn)}
	if a.Owner == "" {
		a.Text = fmt.Sprintf("%s (%s) is in a free range [%s, %s): no Owner holds it (lsn %d)", key, a.Hash, a.Start, a.End, a.LSN)
		return a, true
	}
	a.Text = fmt.Sprintf("%s (%s) is held by %s at %s, lease %d", key, a.Hash, a.Owner, a.Addr, a.LGN)
	if g, ok := h.op.since[ns][s.Entry.LGN]; ok {
		a.Since, a.SinceLSN, a.SinceCopy = g.at.UTC().Format("2006-01-02T15:04:05.000Z07:00"), uint64(g.lsn), g.snapshot
		if g.snapshot {
			a.Text += fmt.Sprintf(", since %s or before (the dashboard's first copy, lsn %d)", a.Since, a.SinceLSN)
		} else {
			a.Text += fmt.Sprintf(", since %s (lsn %d)", a.Since, a.SinceLSN)
		}
	}
	if a.Migrated {
		a.Text += "; it came by a planned move, with the state"
	}
	return a, true
}
