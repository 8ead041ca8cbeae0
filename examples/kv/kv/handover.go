package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// Planned moves (C§2.1.2). When the Manager moves a range between two live
// servers — the old one drains before a restart, a new one joins — it asks
// the holder to hand the range's state over. The holder copies the values
// it stores in the range, stops accepting writes on it (503, retried by
// the client), and POSTs them to the next owner at migratePath. Once that
// server answered 2xx it has them, and the holder calls HandoverDone: the
// Manager grants the range to the next owner marked migrated, and the next
// owner takes the values up. A grant without the mark means the handover
// did not complete in time; the values received are thrown away, and the
// Lookups report the range lost.

// migratePath is where a server receives the values of ranges handed to
// it. It is for the other servers, not for clients.
const migratePath = "/internal/migrate"

// migrateBatchBytes bounds the values of one migrate request; a range with
// more is sent in several (well under MaxMigrateBytes, base64 included).
const migrateBatchBytes = 4 << 20

// pendingGrace is how long after the sender's deadline a server keeps
// values handed to it: the Manager may still grant the range migrated if
// the sender's report crossed the deadline.
const pendingGrace = time.Minute

// migrateRequest is the body of POST /internal/migrate.
type migrateRequest struct {
	From string `json:"from"` // the sender's Owner ID
	To   string `json:"to"`   // the receiver's Owner ID: refused (409) by any other
	// WithinMS is how long the sender has left to complete the handover,
	// in milliseconds; the receiver keeps the values that long and a
	// grace period more.
	WithinMS int64          `json:"within_ms"`
	Ranges   []migrateRange `json:"ranges"`
}

// migrateRange is one range handed over: its bounds, the sender's lease on
// it, and its values. A range may come in several requests with the same
// lease; they add up.
type migrateRange struct {
	Start   uint64  `json:"start"`
	End     uint64  `json:"end"` // 0 is the end of the key space
	Epoch   uint64  `json:"epoch"`
	LGN     uint64  `json:"lgn"`
	Entries []entry `json:"entries"`
}

func (m migrateRange) keyRange() keyspace.Range {
	return keyspace.Range{Start: keyspace.Key(m.Start), End: keyspace.Key(m.End)}
}

func (m migrateRange) lease() owner.LeaseNum {
	return owner.LeaseNum{Epoch: m.Epoch, LGN: keyspace.LGN(m.LGN)}
}

// handleMigrate receives ranges handed over by another server.
func (s *Server) handleMigrate(w http.ResponseWriter, r *http.Request) {
	var m migrateRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxMigrateBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(&m)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, fmt.Sprintf("migrate: body larger than %d bytes", MaxMigrateBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "migrate: malformed body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := m.validate(); err != nil {
		http.Error(w, "migrate: "+err.Error(), http.StatusBadRequest)
		return
	}
	if m.To != s.cfg.ID {
		http.Error(w, fmt.Sprintf("migrate: this server is %q, not %q", s.cfg.ID, m.To), http.StatusConflict)
		return
	}
	expires := time.Now().Add(time.Duration(max(m.WithinMS, 0))*time.Millisecond + pendingGrace)
	values := 0
	for _, rg := range m.Ranges {
		s.store.receive(rg.keyRange(), rg.lease(), rg.Entries, expires)
		values += len(rg.Entries)
	}
	s.cfg.Logger.Debug("kv: received a handover", "from", m.From, "ranges", len(m.Ranges), "values", values)
	w.WriteHeader(http.StatusNoContent)
}

func (m *migrateRequest) validate() error {
	switch {
	case m.To == "":
		return errors.New(`no "to": the receiving server's ID is required`)
	case len(m.Ranges) == 0:
		return errors.New("no ranges")
	case m.WithinMS < 0 || m.WithinMS > MaxMigrateWithin.Milliseconds():
		return fmt.Errorf("within_ms %d is outside [0, %d] (kv.MaxMigrateWithin)", m.WithinMS, MaxMigrateWithin.Milliseconds())
	}
	for _, rg := range m.Ranges {
		r := rg.keyRange()
		if !r.Valid() {
			return fmt.Errorf("range %s is empty or reversed", r)
		}
		if rg.LGN == 0 {
			return fmt.Errorf("range %s: no lease (lgn 0)", r)
		}
		for _, e := range rg.Entries {
			switch {
			case e.Key == "":
				return fmt.Errorf("range %s: an empty key", r)
			case !r.Contains(keyspace.KeyOf(e.Key)):
				return fmt.Errorf("key %q is not in range %s", e.Key, r)
			case len(e.Value) > MaxValueBytes:
				return fmt.Errorf("key %q: value of %d bytes is larger than %d", e.Key, len(e.Value), MaxValueBytes)
			}
		}
	}
	return nil
}

// handovers runs a Server's outgoing handovers, one goroutine per target
// and batch of planned moves.
type handovers struct {
	s      *Server
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu                   sync.Mutex
	ranges, failed, sent int // guarded by mu: ranges handed over, failed, values sent
}

func newHandovers(s *Server) *handovers {
	h := &handovers{s: s}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// start hands the ranges of hs over, grouped by target. It is called from
// the OnChange upcall, which must not block on the network.
func (h *handovers) start(hs []owner.Handover) {
	type target struct{ id, addr string }
	groups := map[target][]owner.Handover{}
	var order []target
	for _, ho := range hs {
		t := target{ho.To, ho.Addr}
		if groups[t] == nil {
			order = append(order, t)
		}
		groups[t] = append(groups[t], ho)
	}
	for _, t := range order {
		h.wg.Go(func() { h.send(t.id, t.addr, groups[t]) })
	}
}

// stop cancels the handovers still running and waits for them. Call it
// after the Owner is closed: no upcall starts one any more.
func (h *handovers) stop() {
	h.cancel()
	h.wg.Wait()
}

// counts returns the ranges handed over, the handovers that failed, and the
// values sent.
func (h *handovers) counts() (ranges, failed, sent int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ranges, h.failed, h.sent
}

// send copies the values of hs's ranges to the server to at addr, and
// ends each handover: done if that server took them before the deadline.
func (h *handovers) send(to, addr string, hs []owner.Handover) {
	s := h.s
	deadline := hs[0].Deadline
	var ranges []migrateRange
	var taken []owner.Handover
	values := 0
	for _, ho := range hs {
		if ho.Deadline.Before(deadline) {
			deadline = ho.Deadline
		}
		entries, held := s.store.beginHandover(ho)
		if !held {
			s.owner.HandoverDone(ho, false)
			continue
		}
		taken = append(taken, ho)
		values += len(entries)
		ranges = append(ranges, migrateRange{Start: uint64(ho.Range.Start), End: uint64(ho.Range.End),
			Epoch: ho.Lease.Epoch, LGN: uint64(ho.Lease.LGN), Entries: entries})
	}
	if len(taken) == 0 {
		return
	}
	// Finish a little before the deadline: the Manager's started when it
	// asked, a network delay before ours.
	margin := min(time.Until(deadline)/10, 250*time.Millisecond)
	ctx, cancel := context.WithDeadline(h.ctx, deadline.Add(-margin))
	defer cancel()
	started := time.Now()
	var err error
	for _, batch := range batches(ranges, migrateBatchBytes) {
		body, merr := json.Marshal(migrateRequest{From: s.cfg.ID, To: to,
			WithinMS: time.Until(deadline).Milliseconds(), Ranges: batch})
		if merr != nil {
			err = merr
			break
		}
		if err = h.post(ctx, addr, body); err != nil {
			break
		}
	}
	if err == nil && !time.Now().Before(deadline) {
		// The copy arrived, but too late: past the deadline this server
		// takes writes on the ranges again (movingLocked), which the copy
		// lacks. The Owner would refuse the handover anyway; say so here.
		err = errors.New("the values arrived after the handover's deadline")
	}
	for _, ho := range taken {
		s.owner.HandoverDone(ho, err == nil)
		if err != nil {
			s.store.endHandover(ho) // the range stays here until the Manager recalls it
		}
	}
	h.mu.Lock()
	if err == nil {
		h.ranges += len(taken)
		h.sent += values
	} else {
		h.failed += len(taken)
	}
	h.mu.Unlock()
	if err != nil {
		s.cfg.Logger.Warn("kv: handover failed; the ranges move without their values", "to", to, "addr", addr,
			"ranges", len(taken), "values", values, "err", err)
		return
	}
	s.cfg.Logger.Debug("kv: handed ranges over", "to", to, "addr", addr, "ranges", len(taken), "values", values,
		"took", time.Since(started))
}

// post sends one migrate request, retrying while the target cannot be
// reached or answers 5xx, until ctx ends. A 4xx answer is final.
func (h *handovers) post(ctx context.Context, addr string, body []byte) error {
	return h.s.postPeer(ctx, addr, migratePath, body, 10*time.Millisecond, 200*time.Millisecond,
		func(status int) bool { return status >= 500 })
}

// batches splits ranges into requests of about limit bytes of values at
// most; a range with more values is split across requests, with its lease
// in each.
func batches(ranges []migrateRange, limit int) [][]migrateRange {
	var out [][]migrateRange
	var cur []migrateRange
	size := 0
	for _, r := range ranges {
		part := r
		part.Entries = nil
		for _, e := range r.Entries {
			n := len(e.Key) + len(e.Value) + 32
			if size+n > limit && size > 0 {
				cur = append(cur, part)
				out = append(out, cur)
				cur, size = nil, 0
				part.Entries = nil
			}
			part.Entries = append(part.Entries, e)
			size += n
		}
		cur = append(cur, part)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
