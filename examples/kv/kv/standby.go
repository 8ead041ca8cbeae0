package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// Standby Owners (docs/standbys.md). With ServerConfig.Standbys 1, in a
// namespace whose Manager names a standby for each range, a server
//
//   - as holder, sends each write on a range with a standby to it at
//     replicatePath, tagged with the range, its lease and the SGN, and
//     answers the client only once the standby stored it (2xx) and its own
//     lease still covers the write; a write the standby does not take in
//     replicateWait is refused 503 (moving), and the client retries;
//   - as holder, fills each standby named for one of its ranges: it copies
//     the range's values to it, like a handover, while the writes go on;
//   - as standby, stores a write or fill only if the Owner library's fence
//     (owner.Owner.CheckStandbyWrite) accepts it, and answers 409 with the
//     refusal otherwise; once a fill is complete it reports in sync
//     (owner.Owner.InSync);
//   - once promoted (a grant marked Promoted), serves the range from the
//     copy it kept.

// replicatePath is where a standby receives its holders' writes and fills.
// It is for the other servers, not for clients.
const replicatePath = "/internal/standby"

// replicateWait bounds how long a write waits for its standby before it is
// refused. A standby that is gone is replaced by the Manager once its
// lease runs out; until then writes on its ranges are refused.
const replicateWait = time.Second

// MaxFillPieces is the most pieces a fill may name: a lease's pieces are
// few (a recall splits one off at a time).
const MaxFillPieces = 1024

// fillAttempt bounds one attempt at a fill; between attempts the holder
// checks that the pairing is still current.
const fillAttempt = 3 * time.Second

// replicateRequest is the body of POST /internal/standby: writes of one
// range from its holder, or one batch of a fill.
type replicateRequest struct {
	From  string `json:"from"` // the holder's Owner ID
	To    string `json:"to"`   // the standby's Owner ID: refused (409) by any other
	Start uint64 `json:"start"`
	End   uint64 `json:"end"` // 0 is the end of the key space
	Epoch uint64 `json:"epoch"`
	LGN   uint64 `json:"lgn"`
	SGN   uint64 `json:"sgn"`
	// Fill marks a batch of a fill; First its first batch, Last its last:
	// the standby reports in sync once it stored the last.
	Fill    bool           `json:"fill,omitempty"`
	First   bool           `json:"first,omitempty"`
	Last    bool           `json:"last,omitempty"`
	Entries []replicaEntry `json:"entries"`
	// Pieces, in a fill's last batch, are the pieces of the lease the
	// holder held when it copied the fill (inside the range): the standby
	// reports exactly those in sync (docs/design.md rule 23).
	Pieces []span `json:"pieces,omitempty"`
}

// span is a key range [Start, End) on the wire (End 0: the key space's
// end).
type span struct {
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

func (p span) keys() keyspace.Range {
	return keyspace.Range{Start: keyspace.Key(p.Start), End: keyspace.Key(p.End)}
}

// replicaEntry is one value sent to a standby, with the holder's write
// number, which orders writes that arrive out of order.
type replicaEntry struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
	Seq   uint64 `json:"seq"`
}

func (m *replicateRequest) validate() error {
	r := keyspace.Range{Start: keyspace.Key(m.Start), End: keyspace.Key(m.End)}
	switch {
	case m.From == "" || m.To == "":
		return errors.New(`"from" and "to" (the holder's and standby's IDs) are required`)
	case !r.Valid():
		return fmt.Errorf("range %s is empty or reversed", r)
	case m.LGN == 0 || m.SGN == 0:
		return fmt.Errorf("range %s: lgn %d and sgn %d must both be non-zero", r, m.LGN, m.SGN)
	case !m.Fill && len(m.Entries) == 0:
		return errors.New("a write without entries")
	case !m.Fill && (m.First || m.Last):
		return errors.New(`"first" and "last" without "fill"`)
	case len(m.Pieces) > 0 && !m.Last:
		return errors.New(`"pieces" outside a fill's last batch`)
	case len(m.Pieces) > MaxFillPieces:
		return fmt.Errorf("range %s: %d pieces; at most %d allowed (MaxFillPieces)", r, len(m.Pieces), MaxFillPieces)
	}
	for _, p := range m.Pieces {
		if q := p.keys(); !q.Valid() || !r.Covers(q) {
			return fmt.Errorf("piece %s is empty, reversed or outside range %s", q, r)
		}
	}
	for _, e := range m.Entries {
		switch {
		case e.Key == "":
			return fmt.Errorf("range %s: an empty key", r)
		case !r.Contains(keyspace.KeyOf(e.Key)):
			return fmt.Errorf("key %q is not in range %s", e.Key, r)
		case len(e.Value) > MaxValueBytes:
			return fmt.Errorf("key %q: value of %d bytes is larger than %d", e.Key, len(e.Value), MaxValueBytes)
		}
	}
	return nil
}

// handleReplicate receives a holder's writes and fills, as standby.
func (s *Server) handleReplicate(w http.ResponseWriter, r *http.Request) {
	var m replicateRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxMigrateBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(&m)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, fmt.Sprintf("standby: body larger than %d bytes", MaxMigrateBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "standby: malformed body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := m.validate(); err != nil {
		http.Error(w, "standby: "+err.Error(), http.StatusBadRequest)
		return
	}
	if m.To != s.cfg.ID {
		http.Error(w, fmt.Sprintf("standby: this server is %q, not %q", s.cfg.ID, m.To), http.StatusConflict)
		return
	}
	if s.cfg.Standbys == 0 {
		http.Error(w, "standby: this server runs without standbys (kv serve --standbys 0)", http.StatusConflict)
		return
	}
	lease := owner.LeaseNum{Epoch: m.Epoch, LGN: keyspace.LGN(m.LGN)}
	rg := keyspace.Range{Start: keyspace.Key(m.Start), End: keyspace.Key(m.End)}
	err = s.store.replicate(replica{from: m.From, r: rg, lease: lease, sgn: protocol.SGN(m.SGN),
		fill: m.Fill, first: m.First, entries: m.Entries})
	if err != nil {
		s.sbMetrics.refused.Inc()
		level := slog.LevelDebug
		if m.Fill {
			level = slog.LevelWarn // rare: the holder learned the pairing first, or it is stale
		}
		s.cfg.Logger.Log(r.Context(), level, "kv: refused a replicated write", "from", m.From, "range", rg.String(),
			"lgn", m.LGN, "sgn", m.SGN, "fill", m.Fill, "err", err)
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if m.Fill && m.Last {
		pieces := make([]keyspace.Range, len(m.Pieces))
		for i, p := range m.Pieces {
			pieces[i] = p.keys()
		}
		s.owner.InSync(lease, protocol.SGN(m.SGN), pieces)
		s.cfg.Logger.Info("kv: standby filled; in sync", "range", rg.String(), "holder", m.From, "sgn", m.SGN)
	}
	w.WriteHeader(http.StatusNoContent)
}

// sbMetrics are a server's standby metrics.
type sbMetrics struct {
	replicated prometheus.Counter   // writes a standby stored before they were acknowledged
	failed     prometheus.Counter   // writes refused because the standby did not store them
	refused    prometheus.Counter   // replicated writes or fills this server refused as standby
	fills      prometheus.Histogram // fill times, named to filled, as holder
}

func newSBMetrics(reg prometheus.Registerer) *sbMetrics {
	m := &sbMetrics{
		replicated: prometheus.NewCounter(prometheus.CounterOpts{Name: "kv_standby_replicated_writes_total",
			Help: "Writes this server stored at their range's standby before acknowledging them, as holder."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "kv_standby_failed_writes_total",
			Help: "Writes refused (503) because their range's standby did not store them in time, as holder."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "kv_standby_refusals_total",
			Help: "Replicated writes and fills this server refused as standby: not from the current holder, lease and SGN."}),
		fills: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kv_standby_fill_seconds",
			Help:    "How long filling a newly named standby took, from the role's arrival to the standby's answer, as holder.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
	}
	reg.MustRegister(m.replicated, m.failed, m.refused, m.fills)
	return m
}

// replicator sends a holder's writes and fills to its standbys.
type replicator struct {
	s      *Server
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	filling map[fillKey]bool // guarded by mu: fills started, by role
	filled  int              // guarded by mu
	fillDur time.Duration    // guarded by mu: the last fill's time
}

// fillKey names one standby role of a range: a fill is sent once per.
type fillKey struct {
	r     keyspace.Range
	lease owner.LeaseNum
	sgn   protocol.SGN
	to    string
}

func fillKeyOf(p owner.Pairing) fillKey { return fillKey{p.Range, p.Lease, p.SGN, p.Peer} }

func newReplicator(s *Server) *replicator {
	p := &replicator{s: s, filling: map[fillKey]bool{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

func (p *replicator) stop() {
	p.cancel()
	p.wg.Wait()
}

// write sends one write to its standby, retrying until it is stored or
// replicateWait has passed.
func (p *replicator) write(ctx context.Context, w write) error {
	sb := w.standby
	body, err := json.Marshal(replicateRequest{From: p.s.cfg.ID, To: sb.Peer,
		Start: uint64(sb.Range.Start), End: uint64(sb.Range.End), Epoch: sb.Lease.Epoch, LGN: uint64(sb.Lease.LGN),
		SGN: uint64(sb.SGN), Entries: []replicaEntry{{Key: w.key, Value: w.value, Seq: w.seq}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, replicateWait)
	defer cancel()
	if err := p.post(ctx, sb.Addr, body); err != nil {
		p.s.sbMetrics.failed.Inc()
		return fmt.Errorf("%w: %s: %v", errStandby, sb.Peer, err)
	}
	p.s.sbMetrics.replicated.Inc()
	return nil
}

// changed starts a fill for each standby newly named for a lease this
// server holds (OwnershipChange.Paired) and not filled by it yet. It runs
// on the upcall goroutine, which must not block on the network.
func (p *replicator) changed(ch owner.OwnershipChange) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.filling {
		if !p.current(owner.Pairing{Range: k.r, Lease: k.lease, SGN: k.sgn, Peer: k.to}) {
			delete(p.filling, k)
		}
	}
	for _, sb := range ch.Paired {
		k := fillKeyOf(sb)
		if sb.Peer == "" || p.filling[k] {
			continue
		}
		p.filling[k] = true
		if !sb.InSync {
			p.wg.Go(func() { p.fill(sb, time.Now()) })
		}
	}
}

// current reports whether sb is still the pairing of its lease.
func (p *replicator) current(sb owner.Pairing) bool {
	return pairingHeld(sb, p.s.owner.Held(), p.s.owner.StandbyOf)
}

// pairingHeld reports whether sb is still the pairing of its lease on any
// piece of sb's range the lease still holds: a piece recalled mid-fill
// (the range's first, say) leaves the rest to fill.
func pairingHeld(sb owner.Pairing, held []owner.Lease, standbyOf func(keyspace.Key) (owner.Pairing, bool)) bool {
	for _, l := range held {
		if l.Num != sb.Lease || !l.Range.Overlaps(sb.Range) {
			continue
		}
		now, ok := standbyOf(max(l.Range.Start, sb.Range.Start))
		if ok && now.Peer == sb.Peer && now.SGN == sb.SGN && now.Lease == sb.Lease {
			return true
		}
	}
	return false
}

// fill copies the range of sb to it, in batches, after a first batch that
// tells it a fill starts; it retries the whole fill while sb stays the
// range's standby. Writes go on meanwhile, each sent to the standby too:
// the standby keeps the later of a write and its value in the copy.
func (p *replicator) fill(sb owner.Pairing, named time.Time) {
	log := p.s.cfg.Logger
	for attempt := 0; ; attempt++ {
		if p.ctx.Err() != nil || !p.current(sb) {
			return
		}
		entries, pieces, err := p.s.store.fillCopy(sb)
		if err == nil {
			err = p.sendFill(sb, entries, pieces)
		}
		if err == nil {
			took := time.Since(named)
			p.s.sbMetrics.fills.Observe(took.Seconds())
			p.mu.Lock()
			p.filled++
			p.fillDur = took
			p.mu.Unlock()
			log.Info("kv: filled a standby", "range", sb.Range.String(), "standby", sb.Peer, "sgn", sb.SGN,
				"values", len(entries), "took", took)
			return
		}
		log.Warn("kv: filling a standby failed; retrying", "range", sb.Range.String(), "standby", sb.Peer, "err", err)
		t := time.NewTimer(min(time.Duration(attempt+1)*100*time.Millisecond, time.Second))
		select {
		case <-p.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (p *replicator) sendFill(sb owner.Pairing, entries []replicaEntry, pieces []keyspace.Range) error {
	base := replicateRequest{From: p.s.cfg.ID, To: sb.Peer, Start: uint64(sb.Range.Start), End: uint64(sb.Range.End),
		Epoch: sb.Lease.Epoch, LGN: uint64(sb.Lease.LGN), SGN: uint64(sb.SGN), Fill: true}
	var parts [][]replicaEntry
	var cur []replicaEntry
	size := 0
	for _, e := range entries {
		n := len(e.Key) + len(e.Value) + 48
		if size+n > migrateBatchBytes && size > 0 {
			parts, cur, size = append(parts, cur), nil, 0
		}
		cur, size = append(cur, e), size+n
	}
	parts = append(parts, cur)
	// A standby that refuses for this long has another pairing: the fill
	// checks whether its own is still current, and starts again.
	ctx, cancel := context.WithTimeout(p.ctx, fillAttempt)
	defer cancel()
	for i, part := range parts {
		m := base
		m.First, m.Last, m.Entries = i == 0, i == len(parts)-1, part
		if m.Entries == nil {
			m.Entries = []replicaEntry{}
		}
		if m.Last {
			for _, q := range pieces {
				m.Pieces = append(m.Pieces, span{Start: uint64(q.Start), End: uint64(q.End)})
			}
		}
		body, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if err := p.post(ctx, sb.Addr, body); err != nil {
			return err
		}
	}
	return nil
}

// post sends one request to a standby, retrying while it cannot be reached
// or refuses (it may not know its role yet: the Manager's answers to the
// two servers cross), until ctx ends. A 400 is final.
func (p *replicator) post(ctx context.Context, addr string, body []byte) error {
	// A standby refuses what it must not take with 400; anything else may pass.
	return p.s.postPeer(ctx, addr, replicatePath, body, 5*time.Millisecond, 100*time.Millisecond,
		func(status int) bool { return status != http.StatusBadRequest })
}

// put stores a write and, when its range has a standby, acknowledges it
// only once the standby stored it and the lease still covers it.
func (s *Server) put(ctx context.Context, key string, value []byte) error {
	w, err := s.store.putWrite(key, value)
	if err != nil || w.standby.Peer == "" {
		return err
	}
	if err := s.repl.write(ctx, w); err != nil {
		return err
	}
	// (4) Did the lease cover the whole operation, the standby's store
	// included, under one pairing?
	if !s.owner.CheckReplicated(w.k, w.standby) {
		return errLeaseLost
	}
	return nil
}

// StandbyStats counts a server's standby work.
type StandbyStats struct {
	// Copies is the values kept as standby; Promoted those taken up when a
	// range was promoted to this server.
	Copies   int `json:"copies"`
	Promoted int `json:"promoted"`
	// Fills is the standbys this server filled as holder, LastFill the
	// last one's time.
	Fills    int           `json:"fills"`
	LastFill time.Duration `json:"last_fill_ns"`
}

// StandbyStats returns the server's standby counts so far.
func (s *Server) StandbyStats() StandbyStats {
	var st StandbyStats
	st.Copies, st.Promoted = s.store.copyCounts()
	s.repl.mu.Lock()
	st.Fills, st.LastFill = s.repl.filled, s.repl.fillDur
	s.repl.mu.Unlock()
	return st
}

// standbysJSON is the answer of GET /standbys: this server's standby roles
// as its Owner knows them, for operators and tests.
type standbysJSON struct {
	ID       string        `json:"id"`
	Zone     string        `json:"zone"`
	Standbys []sbRoleJSON  `json:"standbys"` // of the ranges this server holds
	Holders  []sbRoleJSON  `json:"holders"`  // of the ranges it stands by for
	Stats    *StandbyStats `json:"stats"`
}

type sbRoleJSON struct {
	Start  string `json:"start"` // 0x and 16 hex digits
	End    string `json:"end"`   // 0x10000000000000000: the end of the key space
	Peer   string `json:"peer"`  // the standby (in standbys) or the holder (in holders); empty: none
	LGN    uint64 `json:"lgn"`
	SGN    uint64 `json:"sgn"`
	InSync bool   `json:"in_sync"`
}

func hexRange(r keyspace.Range) (string, string) {
	end := fmt.Sprintf("0x%016x", uint64(r.End))
	if r.End == 0 {
		end = "0x10000000000000000"
	}
	return fmt.Sprintf("0x%016x", uint64(r.Start)), end
}

// handleStandbys answers GET /standbys.
func (s *Server) handleStandbys(w http.ResponseWriter, _ *http.Request) {
	st := s.StandbyStats()
	out := standbysJSON{ID: s.cfg.ID, Zone: s.cfg.Zone, Standbys: []sbRoleJSON{}, Holders: []sbRoleJSON{}, Stats: &st}
	for _, sb := range s.owner.Standbys() {
		start, end := hexRange(sb.Range)
		out.Standbys = append(out.Standbys, sbRoleJSON{Start: start, End: end, Peer: sb.Peer, LGN: uint64(sb.Lease.LGN),
			SGN: uint64(sb.SGN), InSync: sb.InSync})
	}
	for _, h := range s.owner.StandbyFor() {
		start, end := hexRange(h.Range)
		out.Holders = append(out.Holders, sbRoleJSON{Start: start, End: end, Peer: h.Peer, LGN: uint64(h.Lease.LGN),
			SGN: uint64(h.SGN), InSync: h.InSync})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
