package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
)

// Config configures a Hub. The zero value of each field but Source takes
// the default named in its comment.
type Config struct {
	// Source supplies the tables, the status and the drain; required.
	Source Source
	// Buckets is how many arcs the key space is drawn as, a power of two
	// from 64 to 65536; 0 means 4096.
	Buckets int
	// Refresh is how often the Manager's Status is asked for (the Owners'
	// load, the replicas), whatever the number of viewers; 0 means 1 s.
	Refresh time.Duration
	// Coalesce is the least time between two views sent to the viewers: a
	// burst of table changes within it is sent as one; 0 means 100 ms.
	Coalesce time.Duration
	// Events is how many timeline events are kept and sent; 0 means 500.
	Events int
	// MaxViewers bounds the open event streams; 0 means 256. A viewer past
	// it is refused with 503.
	MaxViewers int
	// ReadOnly removes the drain action.
	ReadOnly bool
	// Now is the clock for the timeline; nil means time.Now.
	Now func() time.Time
	// Logger receives the Hub's logs; nil discards them.
	Logger *slog.Logger
}

func (c *Config) normalize() error {
	if c.Source == nil {
		return errors.New("dashboard: Config.Source is required")
	}
	if c.Buckets == 0 {
		c.Buckets = 4096
	}
	if c.Buckets < 64 || c.Buckets > 65536 || c.Buckets&(c.Buckets-1) != 0 {
		return fmt.Errorf("dashboard: Config.Buckets %d: want a power of two from 64 to 65536", c.Buckets)
	}
	if c.Refresh == 0 {
		c.Refresh = time.Second
	}
	if c.Coalesce == 0 {
		c.Coalesce = 100 * time.Millisecond
	}
	if c.Events == 0 {
		c.Events = 500
	}
	if c.MaxViewers == 0 {
		c.MaxViewers = 256
	}
	switch {
	case c.Refresh < 0:
		return fmt.Errorf("dashboard: Config.Refresh %s must be positive", c.Refresh)
	case c.Coalesce < 0:
		return fmt.Errorf("dashboard: Config.Coalesce %s must be positive", c.Coalesce)
	case c.Events < 0:
		return fmt.Errorf("dashboard: Config.Events %d must be positive", c.Events)
	case c.MaxViewers < 0:
		return fmt.Errorf("dashboard: Config.MaxViewers %d must be positive", c.MaxViewers)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Event is one line of the timeline.
type Event struct {
	Seq  uint64 `json:"seq"`
	At   string `json:"at"` // RFC 3339, milliseconds
	NS   string `json:"ns"`
	Kind string `json:"kind"` // snapshot, grant, move, free, loss, drain, refused, joined, left, draining
	// Owners are the Owners the event concerns: a change's new holder and
	// the one that held the range when the dashboard last drew it; a
	// loss's holders as last drawn. Filtering by Owner matches these.
	Owners []string `json:"owners"`
	Text   string   `json:"text"`
	// Count is how many ranges a planned move's line stands for: the
	// ranges moved from one Owner to another within moveWindow of the
	// last, on one line.
	Count int `json:"count,omitempty"`
}

// Hub keeps what the dashboard shows and sends it to every viewer: one
// view, built once per change and written to all of them, so the
// Manager's cost (one Lookup per namespace and one Status per Refresh)
// does not grow with the number of viewers.
//
// Changed and Lost are the Lookup's upcalls; Run polls the status and
// builds the views.
type Hub struct {
	cfg   Config
	dirty chan struct{} // a view is due; capacity 1

	mu        sync.Mutex
	status    Status // guarded by mu; the last answer
	statusErr string // guarded by mu; why the last Status failed, or ""
	statusAt  time.Time
	events    []Event          // guarded by mu; the newest cfg.Events
	seq       uint64           // guarded by mu; the last event's
	drawn     map[string]drawn // guarded by mu; each namespace as last drawn
	latest    []byte           // guarded by mu; the last view, JSON
	builds    uint64           // guarded by mu; views built
	viewers   map[*viewer]bool // guarded by mu
	polls     uint64           // guarded by mu; Status calls made
	op        opState          // guarded by mu; losses, moves, grant times (operator.go)
}

// drawn is a namespace's table as the last view drew it, for hover and to
// name the Owner a loss or a change took a range from.
type drawn struct {
	segs []leasetable.Segment
	lsn  keyspace.LSN
}

type viewer struct{ ch chan struct{} } // capacity 1: a view is waiting

// NewHub returns a Hub; start it with Run.
func NewHub(cfg Config) (*Hub, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	return &Hub{cfg: cfg, dirty: make(chan struct{}, 1), drawn: map[string]drawn{}, viewers: map[*viewer]bool{}}, nil
}

// Run polls the Manager's status every Refresh and sends a view whenever
// something changed, at most one per Coalesce, until ctx ends.
func (h *Hub) Run(ctx context.Context) error {
	h.Poll(ctx)
	h.Build()
	refresh := time.NewTicker(h.cfg.Refresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
			h.Poll(ctx)
			h.markDirty()
		case <-h.dirty:
			wait := time.NewTimer(h.cfg.Coalesce)
			select {
			case <-ctx.Done():
				wait.Stop()
				return nil
			case <-wait.C:
			}
			h.Build()
		}
	}
}

func (h *Hub) markDirty() {
	select {
	case h.dirty <- struct{}{}:
	default:
	}
}

// Poll asks the Source for the status once and records what changed in it
// (Owners that joined, left or started draining) on the timeline.
func (h *Hub) Poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(h.cfg.Refresh, 2*time.Second))
	defer cancel()
	st, err := h.cfg.Source.Status(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.polls++
	if err != nil {
		if h.statusErr == "" {
			h.cfg.Logger.Warn("dashboard: status", "err", err)
		}
		h.statusErr = err.Error()
		return
	}
	if h.statusAt.IsZero() {
		h.status = st // the first answer is the baseline, not news
	}
	old := map[string]map[string]Owner{}
	for _, n := range h.status.Namespaces {
		old[n.Name] = map[string]Owner{}
		for _, o := range n.Owners {
			old[n.Name][o.ID] = o
		}
	}
	for _, n := range st.Namespaces {
		was := old[n.Name]
		for _, o := range n.Owners {
			prev, ok := was[o.ID]
			switch {
			case !ok:
				h.eventLocked(n.Name, "joined", []string{o.ID}, fmt.Sprintf("%s joined at %s (incarnation %d)", o.ID, o.Addr, o.Incarnation))
			case o.Draining && !prev.Draining:
				h.eventLocked(n.Name, "draining", []string{o.ID}, fmt.Sprintf("%s is draining: its ranges move to the other Owners", o.ID))
			}
			delete(was, o.ID)
		}
		for id := range was {
			h.eventLocked(n.Name, "left", []string{id}, fmt.Sprintf("%s is no longer known to the Manager", id))
		}
	}
	h.status, h.statusErr, h.statusAt = st, "", h.cfg.Now()
}

// eventLocked appends an event to the timeline.
func (h *Hub) eventLocked(ns, kind string, owners []string, text string) {
	h.seq++
	if owners == nil {
		owners = []string{}
	}
	h.events = append(h.events, Event{Seq: h.seq, At: h.cfg.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		NS: ns, Kind: kind, Owners: owners, Text: text})
	if over := len(h.events) - h.cfg.Events; over > 0 {
		h.events = slices.Delete(h.events, 0, over)
	}
}

// Changed is the Lookup's OnUpdate for namespace ns: each change goes on the
// timeline, as a grant, a planned move (a grant that migrated the previous
// holder's state) or a range freed.
func (h *Hub) Changed(ns string, u lookup.Update) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u.Update.Snapshot {
		holders := holdersOf(u.Update.Segments)
		h.eventLocked(ns, "snapshot", nil, fmt.Sprintf("a full copy of the table at lsn %d: %d ranges, %d Owners",
			u.Update.To, len(u.Update.Segments), len(holders)))
	}
	h.grantedLocked(ns, u)
	d := h.drawn[ns]
	for _, c := range u.Update.Changes {
		var owners []string
		if c.Entry.Owner != "" {
			owners = append(owners, c.Entry.Owner)
		}
		from := "free"
		if s, ok := segmentAt(d.segs, c.Range.Start); ok && s.Entry.Owner != "" {
			from = s.Entry.Owner
			if from != c.Entry.Owner {
				owners = append(owners, from)
			}
		}
		span := "[" + hexKey(c.Range.Start) + ", " + hexEnd(c.Range) + ")"
		switch {
		case c.Entry.Free():
			h.eventLocked(ns, "free", owners, fmt.Sprintf("lsn %d %s: %s → free", c.LSN, span, from))
		case c.Entry.Migrated:
			h.moveLocked(ns, from, c) // one line per move
		default:
			h.eventLocked(ns, "grant", owners, fmt.Sprintf("lsn %d %s: %s → %s (lgn %d)", c.LSN, span, from, c.Entry.Owner, c.Entry.LGN))
		}
	}
	h.markDirty()
}

// lossShown is how many of a loss notification's ranges its timeline line
// spells out.
const lossShown = 3

// Lost is the Lookup's OnLoss for namespace ns: the loss is counted and
// listed (the losses view) and put on the timeline, naming the Owners
// whose state was lost.
func (h *Hub) Lost(ns string, l lookup.Loss) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.lossLocked(ns, l)
	if l.All {
		h.eventLocked(ns, "loss", nil, "LOSS of all ranges: no sync with the Manager within its sync timeout")
		h.markDirty()
		return
	}
	text, owners := lossText(e)
	h.eventLocked(ns, "loss", owners, text)
	h.markDirty()
}

// overlapping returns the segments of segs (sorted) that overlap r.
func overlapping(segs []leasetable.Segment, r keyspace.Range) []leasetable.Segment {
	i, _ := slices.BinarySearchFunc(segs, r.Start, func(s leasetable.Segment, k keyspace.Key) int {
		if s.Range.Contains(k) {
			return 0
		}
		return cmp.Compare(s.Range.Start, k)
	})
	var out []leasetable.Segment
	for ; i < len(segs) && segs[i].Range.Overlaps(r); i++ {
		out = append(out, segs[i])
	}
	return out
}

// Drain asks the Source to drain an Owner and puts the answer on the
// timeline.
func (h *Hub) Drain(ctx context.Context, ns, owner string) (string, error) {
	if h.cfg.ReadOnly {
		return "", errors.New("this dashboard is read-only")
	}
	answer, err := h.cfg.Source.Drain(ctx, ns, owner)
	h.mu.Lock()
	if err != nil {
		h.eventLocked(ns, "refused", []string{owner}, "drain "+owner+" refused: "+err.Error())
	} else {
		h.eventLocked(ns, "drain", []string{owner}, answer)
	}
	h.mu.Unlock()
	h.markDirty()
	return answer, err
}

// view is what a viewer receives, as JSON, on every change.
type view struct {
	Build      uint64    `json:"build"`
	At         string    `json:"at"`
	ReadOnly   bool      `json:"readOnly"`
	Epoch      uint64    `json:"epoch"`
	Leader     uint64    `json:"leader"`
	StatusErr  string    `json:"statusError,omitempty"`
	StatusAge  float64   `json:"statusAge"` // seconds since the last Status answer
	Managers   []Manager `json:"managers"`
	Namespaces []nsView  `json:"namespaces"`
	Hot        []hotView `json:"hot"`
	Events     []Event   `json:"events"`
	Buckets    int       `json:"buckets"`
	// LossCount counts the loss notifications since the dashboard
	// started; Losses are the newest of them (lossesKept), newest first,
	// in the loss schema (lookup.LossEvent, docs/protocol.md).
	LossCount uint64             `json:"lossCount"`
	Losses    []lookup.LossEvent `json:"losses"`
}

type nsView struct {
	Name       string   `json:"name"`
	LSN        uint64   `json:"lsn"`
	Ranges     int      `json:"ranges"`
	FreeRanges int      `json:"freeRanges"`
	Lookups    uint32   `json:"lookups"`
	Standbys   uint32   `json:"standbys"` // standby Owners per range
	Owners     []Owner  `json:"owners"`   // sorted by ID; Band indexes them
	Holders    []string `json:"holders"`  // the Owners holding ranges in the table drawn, sorted
	Band       []int32  `json:"band"`
}

type hotView struct {
	NS    string  `json:"ns"`
	Owner string  `json:"owner"`
	Key   string  `json:"key"`
	Rate  float64 `json:"rate"`
}

// hotShown is how many hot keys a view lists, the busiest first.
const hotShown = 20

// Build builds a view from the Source's tables and the last status and
// sends it to every viewer.
func (h *Hub) Build() {
	h.mu.Lock()
	st, statusErr, statusAt := h.status, h.statusErr, h.statusAt
	h.mu.Unlock()

	byName := map[string]NamespaceStatus{}
	for _, n := range st.Namespaces {
		byName[n.Name] = n
	}
	names := h.cfg.Source.Namespaces()
	v := view{At: h.cfg.Now().UTC().Format(time.RFC3339Nano), ReadOnly: h.cfg.ReadOnly, Epoch: st.Epoch,
		Leader: st.Leader, StatusErr: statusErr, Managers: st.Managers, Buckets: h.cfg.Buckets, Hot: []hotView{}}
	if !statusAt.IsZero() {
		v.StatusAge = h.cfg.Now().Sub(statusAt).Seconds()
	}
	if v.Managers == nil {
		v.Managers = []Manager{}
	}
	fresh := map[string]drawn{}
	for _, name := range names {
		segs, lsn := h.cfg.Source.Segments(name)
		fresh[name] = drawn{segs: segs, lsn: lsn}
		ns := byName[name]
		nv := nsView{Name: name, LSN: uint64(lsn), Ranges: len(segs), Lookups: ns.Lookups, Standbys: ns.Standbys,
			Holders: holdersOf(segs)}
		owners := map[string]Owner{}
		for _, o := range ns.Owners {
			owners[o.ID] = o
			for _, k := range o.HotKeys {
				v.Hot = append(v.Hot, hotView{NS: name, Owner: o.ID, Key: hexKey(k.Key), Rate: k.Rate})
			}
		}
		ranges, shares := map[string]uint32{}, map[string]float64{}
		for _, s := range segs {
			if s.Entry.Free() {
				nv.FreeRanges++
			} else {
				ranges[s.Entry.Owner]++
				shares[s.Entry.Owner] += math.Ldexp(s.Range.Size(), -64) // a fraction of the key space
			}
		}
		for _, id := range nv.Holders {
			o, ok := owners[id]
			if !ok { // in the table before the status names it
				o = Owner{ID: id, Member: true, Capacity: 1}
			}
			o.Ranges, o.Share = ranges[id], shares[id] // the table drawn, fresher than the status
			owners[id] = o
		}
		for id, o := range owners {
			if ranges[id] == 0 {
				o.Ranges, o.Share = 0, 0
				owners[id] = o
			}
		}
		nv.Owners = slices.SortedFunc(func(yield func(Owner) bool) {
			for _, o := range owners {
				if !yield(o) {
					return
				}
			}
		}, func(a, b Owner) int { return strings.Compare(a.ID, b.ID) })
		index := make(map[string]int32, len(nv.Owners))
		for i, o := range nv.Owners {
			index[o.ID] = int32(i)
		}
		nv.Band = bandOf(segs, index, h.cfg.Buckets).Holder
		v.Namespaces = append(v.Namespaces, nv)
	}
	slices.SortStableFunc(v.Hot, func(a, b hotView) int { return cmp.Compare(b.Rate, a.Rate) })
	v.Hot = v.Hot[:min(len(v.Hot), hotShown)]

	h.mu.Lock()
	defer h.mu.Unlock()
	h.drawn = fresh
	h.pruneGrantedLocked(fresh)
	v.LossCount = h.op.lossCount
	v.Losses = make([]lookup.LossEvent, 0, len(h.op.losses))
	for i := len(h.op.losses) - 1; i >= 0; i-- {
		v.Losses = append(v.Losses, h.op.losses[i])
	}
	h.builds++
	v.Build = h.builds
	v.Events = slices.Clone(h.events)
	if v.Events == nil {
		v.Events = []Event{}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("dashboard: marshal view: %v", err)) // plain structs always marshal
	}
	h.latest = b
	for vw := range h.viewers {
		select {
		case vw.ch <- struct{}{}:
		default: // it has a view waiting already; it will read the newest
		}
	}
}

// Latest returns the last view built, JSON, or nil before the first.
func (h *Hub) Latest() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest
}

// segment returns the segment holding k in namespace ns as last drawn, and
// how many segments lie in [from, to] (the arc under the pointer).
func (h *Hub) segment(ns string, k, from, to keyspace.Key) (leasetable.Segment, int, keyspace.LSN, bool) {
	h.mu.Lock()
	d, ok := h.drawn[ns]
	h.mu.Unlock()
	if !ok {
		return leasetable.Segment{}, 0, 0, false
	}
	s, ok := segmentAt(d.segs, k)
	n := len(overlapping(d.segs, keyspace.Range{Start: from, End: to + 1}))
	return s, n, d.lsn, ok
}

// owner returns namespace ns's Owner id as the last status described it.
func (h *Hub) owner(ns, id string) (Owner, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.status.Namespaces {
		if n.Name == ns {
			for _, o := range n.Owners {
				if o.ID == id {
					return o, true
				}
			}
		}
	}
	return Owner{}, false
}

// subscribe adds a viewer, or returns nil when MaxViewers are open.
func (h *Hub) subscribe() *viewer {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.viewers) >= h.cfg.MaxViewers {
		return nil
	}
	v := &viewer{ch: make(chan struct{}, 1)}
	h.viewers[v] = true
	return v
}

func (h *Hub) unsubscribe(v *viewer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.viewers, v)
}

// Stats says what the Hub has cost: Status calls made and views built.
func (h *Hub) Stats() (polls, builds uint64, viewers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.polls, h.builds, len(h.viewers)
}
