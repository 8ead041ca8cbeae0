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

// Planned moves (C§2.1.2): the holder ends the range's streams, copies its
// subscriptions — each with the messages not yet written and the ID of the
// last one written — refuses publishes and subscriptions on it (503,
// retried) from then on, and POSTs the copy to the next owner, which keeps
// it until the range is granted to it marked Migrated. The subscribers
// reconnect naming the last message they received, and the next owner
// resumes each subscription after it.

const handoverPath = "/internal/handover" // for the other servers only

// handoverRequest is the body of POST /internal/handover.
type handoverRequest struct {
	To         string           `json:"to"` // any other server refuses it (409)
	Start, End uint64           // the range
	Topics     map[string][]sub `json:"topics"`
}

// handOver copies the subscriptions of h's range to the next owner,
// retrying until shortly before h's deadline (the Manager's started first),
// and ends the handover.
func (s *Server) handOver(h owner.Handover) {
	body, _ := json.Marshal(handoverRequest{To: h.To, Start: uint64(h.Range.Start), End: uint64(h.Range.End), Topics: s.topics.beginHandover(h)})
	ctx, cancel := context.WithDeadline(s.ctx, h.Deadline.Add(-min(time.Until(h.Deadline)/10, 250*time.Millisecond)))
	defer cancel()
	err := errors.New("no time to send it")
	for wait := 10 * time.Millisecond; ctx.Err() == nil; wait = min(2*wait, 200*time.Millisecond) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.Addr+handoverPath, bytes.NewReader(body))
		var resp *http.Response
		if resp, err = s.peers.Do(req); err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				break
			} else if err = fmt.Errorf("%s answered %s: %s", h.Addr, resp.Status, bytes.TrimSpace(msg)); resp.StatusCode < 500 {
				break // refused: it will not pass
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	// Duty (Config.Handovers): end every handover passed up, saying whether
	// the state reached h.To; without it the range moves without it.
	s.owner.HandoverDone(h, err == nil)
	s.topics.endHandover(h, err == nil)
	if err != nil {
		s.cfg.Logger.Warn("pubsub: handover failed; the range moves without its subscriptions", "to", h.To, "range", h.Range, "err", err)
	}
}

// handleHandover receives subscriptions handed over by another server.
// Anything malformed or too large is refused with 400 and a message.
func (s *Server) handleHandover(w http.ResponseWriter, r *http.Request) {
	var req handoverRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxHandoverBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req) // a body over MaxHandoverBytes fails here
	rg := keyspace.Range{Start: keyspace.Key(req.Start), End: keyspace.Key(req.End)}
	if err == nil && (req.To == "" || !rg.Valid()) {
		err = fmt.Errorf(`a receiving server's ID ("to") and a valid range are required; got %q, %s`, req.To, rg)
	}
	for topic, subs := range req.Topics {
		if err == nil && !rg.Contains(keyspace.KeyOf(topic)) {
			err = fmt.Errorf("topic %q is not in range %s", topic, rg)
		}
		for _, sb := range subs {
			if err == nil && (sb.ID == "" || len(sb.Queue) > MaxQueue) {
				err = fmt.Errorf("topic %q: a subscription with no ID or more than %d messages", topic, MaxQueue)
			}
		}
	}
	if err != nil {
		http.Error(w, "handover: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.To != s.cfg.ID {
		http.Error(w, fmt.Sprintf("handover: this server is %q, not %q", s.cfg.ID, req.To), http.StatusConflict)
		return
	}
	for topic, subs := range req.Topics {
		s.topics.receive(topic, subs)
	}
	w.WriteHeader(http.StatusNoContent)
}
