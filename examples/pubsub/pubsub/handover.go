package pubsub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// Planned moves (C§2.1.2), as in the kv example: the holder ends the
// range's streams, copies its subscriptions — each with the messages not
// yet written and the last ones written — refuses publishes and
// subscriptions on it (503, retried) from then on, and POSTs the copy to
// the next owner, which keeps it until the range is granted to it marked
// migrated. The subscribers reconnect naming the last message they
// received, and the next owner resumes each subscription after it.

// handoverRequest is the body of POST /internal/handover.
type handoverRequest struct {
	From     string          `json:"from"`
	To       string          `json:"to"` // any other server refuses it (409)
	WithinMS int64           `json:"within_ms"`
	Ranges   []handoverRange `json:"ranges"`
}

type handoverRange struct {
	Start, End, Epoch, LGN uint64
	Topics                 map[string][]wireSub
}

// handOver copies the subscriptions of hs's ranges (one target) to their
// next owner and ends each handover.
func (s *Server) handOver(hs []owner.Handover) {
	deadline := hs[0].Deadline
	req := handoverRequest{From: s.cfg.ID, To: hs[0].To}
	subs := 0
	for _, h := range hs {
		if h.Deadline.Before(deadline) {
			deadline = h.Deadline
		}
		topics := s.topics.beginHandover(h)
		for _, ws := range topics {
			subs += len(ws)
		}
		req.Ranges = append(req.Ranges, handoverRange{uint64(h.Range.Start), uint64(h.Range.End),
			h.Lease.Epoch, uint64(h.Lease.LGN), topics})
	}
	// Finish a little before the deadline: the Manager's started first.
	ctx, cancel := context.WithDeadline(s.hctx, deadline.Add(-min(time.Until(deadline)/10, 250*time.Millisecond)))
	defer cancel()
	req.WithinMS = time.Until(deadline).Milliseconds()
	body, err := json.Marshal(req)
	for wait := 10 * time.Millisecond; err == nil; wait = min(2*wait, 200*time.Millisecond) {
		var retry bool
		if retry, err = s.post(ctx, hs[0].Addr, body); err == nil || !retry {
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%w; last: %w", ctx.Err(), err)
		case <-time.After(wait):
			err = nil
		}
	}
	for _, h := range hs {
		s.owner.HandoverDone(h, err == nil)
		if err != nil {
			s.topics.endHandover(h) // the range stays here until recalled
		}
	}
	s.mu.Lock()
	if err == nil {
		s.stats.HandedOver += len(hs)
		s.stats.SubsHandedOver += subs
	} else {
		s.stats.HandoverFailures += len(hs)
	}
	s.mu.Unlock()
	if err != nil {
		s.cfg.Logger.Warn("pubsub: handover failed; the ranges move without their subscriptions",
			"to", hs[0].To, "ranges", len(hs), "subscriptions", subs, "err", err)
	}
}

// post sends one handover; retry says a failure may pass (unreachable, 5xx).
func (s *Server) post(ctx context.Context, addr string, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+handoverPath, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	resp, err := s.peers.Do(req)
	if err != nil {
		return ctx.Err() == nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	return resp.StatusCode >= 500, fmt.Errorf("%s answered %s: %s", addr, resp.Status, bytes.TrimSpace(msg))
}

// handleHandover receives subscriptions handed over by another server.
// Anything malformed is refused with 400 and a message.
func (s *Server) handleHandover(w http.ResponseWriter, r *http.Request) {
	var req handoverRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxHandoverBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		http.Error(w, fmt.Sprintf("handover: body larger than %d bytes", MaxHandoverBytes), http.StatusRequestEntityTooLarge)
		return
	}
	if err == nil {
		err = req.validate()
	}
	if err != nil {
		http.Error(w, "handover: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.To != s.cfg.ID {
		http.Error(w, fmt.Sprintf("handover: this server is %q, not %q", s.cfg.ID, req.To), http.StatusConflict)
		return
	}
	expires := time.Now().Add(time.Duration(max(req.WithinMS, 0))*time.Millisecond + pendingGrace)
	for _, rg := range req.Ranges {
		for topic, subs := range rg.Topics {
			s.topics.receive(topic, subs, expires)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (req *handoverRequest) validate() error {
	if req.To == "" {
		return errors.New(`no "to": the receiving server's ID is required`)
	}
	for _, rg := range req.Ranges {
		r := keyspace.Range{Start: keyspace.Key(rg.Start), End: keyspace.Key(rg.End)}
		if !r.Valid() || rg.LGN == 0 {
			return fmt.Errorf("range %s is empty or reversed, or has no lease", r)
		}
		for topic, subs := range rg.Topics {
			if !r.Contains(keyspace.KeyOf(topic)) {
				return fmt.Errorf("topic %q is not in range %s", topic, r)
			}
			for _, sb := range subs {
				if sb.ID == "" || len(sb.Queue) > MaxQueue || len(sb.Sent) > MaxQueue {
					return fmt.Errorf("topic %q: a subscription with no ID or more than %d messages", topic, MaxQueue)
				}
			}
		}
	}
	return nil
}
