package pubsub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// Planned moves (C§2.1.2), as in the kv example: the holder ends the
// streams of the range, copies its subscriptions — each with the messages
// not yet written and the last ones written — refuses publishes and
// subscriptions on it (503, retried), and POSTs the copy to the next owner,
// which keeps it until the range is granted to it marked migrated. The
// subscribers reconnect, naming the last message they received, and the
// next owner resumes each subscription after it: nothing is missed, nothing
// written twice.

// handoverRequest is the body of POST /internal/handover.
type handoverRequest struct {
	From     string          `json:"from"`
	To       string          `json:"to"`
	WithinMS int64           `json:"within_ms"`
	Ranges   []handoverRange `json:"ranges"`
}

type handoverRange struct {
	Start  uint64               `json:"start"`
	End    uint64               `json:"end"`
	Epoch  uint64               `json:"epoch"`
	LGN    uint64               `json:"lgn"`
	Topics map[string][]wireSub `json:"topics"`
}

func (h handoverRange) keyRange() keyspace.Range {
	return keyspace.Range{Start: keyspace.Key(h.Start), End: keyspace.Key(h.End)}
}

// handOver copies the subscriptions of hs's ranges to their next owner
// (one target) and ends each handover.
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
		req.Ranges = append(req.Ranges, handoverRange{Start: uint64(h.Range.Start), End: uint64(h.Range.End),
			Epoch: h.Lease.Epoch, LGN: uint64(h.Lease.LGN), Topics: topics})
	}
	margin := min(time.Until(deadline)/10, 250*time.Millisecond)
	ctx, cancel := context.WithDeadline(s.hctx, deadline.Add(-margin))
	defer cancel()
	req.WithinMS = time.Until(deadline).Milliseconds()
	body, err := json.Marshal(req)
	if err == nil {
		err = s.post(ctx, hs[0].Addr, body)
	}
	for _, h := range hs {
		s.owner.HandoverDone(h, err == nil)
		if err != nil {
			s.topics.endHandover(h)
		}
	}
	s.mu.Lock()
	if err == nil {
		s.handedOver += len(hs)
		s.subsSent += subs
	} else {
		s.hoFailed += len(hs)
	}
	s.mu.Unlock()
	if err != nil {
		s.cfg.Logger.Warn("pubsub: handover failed; the ranges move without their subscriptions",
			"to", hs[0].To, "ranges", len(hs), "subscriptions", subs, "err", err)
	}
}

// post sends one handover, retrying while the target cannot be reached or
// answers 5xx, until ctx ends.
func (s *Server) post(ctx context.Context, addr string, body []byte) error {
	wait := 10 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+handoverPath, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.peers.Do(req)
		retry := ctx.Err() == nil
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			retry = resp.StatusCode >= 500
			err = fmt.Errorf("%s answered %s: %s", addr, resp.Status, bytes.TrimSpace(msg))
		}
		if !retry {
			return err
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w; last: %w", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// handleHandover receives subscriptions handed over by another server.
func (s *Server) handleHandover(w http.ResponseWriter, r *http.Request) {
	var req handoverRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxHandoverBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, fmt.Sprintf("handover: body larger than %d bytes", MaxHandoverBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "handover: malformed body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := req.validate(); err != nil {
		http.Error(w, "handover: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.To != s.cfg.ID {
		http.Error(w, fmt.Sprintf("handover: this server is %q, not %q", s.cfg.ID, req.To), http.StatusConflict)
		return
	}
	expires := time.Now().Add(time.Duration(max(req.WithinMS, 0))*time.Millisecond + pendingGrace)
	for _, rg := range req.Ranges {
		from := owner.LeaseNum{Epoch: rg.Epoch, LGN: keyspace.LGN(rg.LGN)}
		for topic, subs := range rg.Topics {
			s.topics.receive(topic, from, subs, expires)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (req *handoverRequest) validate() error {
	if req.To == "" {
		return errors.New(`no "to": the receiving server's ID is required`)
	}
	for _, rg := range req.Ranges {
		r := rg.keyRange()
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
