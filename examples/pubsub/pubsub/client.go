package pubsub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// ClientConfig configures a Client; Manager is required.
type ClientConfig struct {
	Manager, Namespace string
	Timing             protocol.Timing
	Logger             *slog.Logger
}

// Client is a frontend: it publishes to a topic's Owner and keeps
// subscriptions open there, finding it with the Lookup library; on a loss
// notification covering a subscription's topic it resubscribes (P§2.1).
type Client struct {
	cfg    ClientConfig
	lookup *lookup.Lookup
	http   *http.Client
	mu     sync.Mutex
	subs   map[*Subscription]bool // guarded by mu
}

// NewClient starts a Client and its Lookup.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Manager == "" {
		return nil, errors.New("pubsub: ClientConfig.Manager is required")
	}
	c := &Client{cfg: cfg, subs: map[*Subscription]bool{},
		http: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}
	if c.cfg.Logger == nil {
		c.cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := lookup.New(ctx, lookup.Config{Manager: cfg.Manager, Namespace: cfg.Namespace, Timing: cfg.Timing,
		Logger: c.cfg.Logger, OnLoss: c.onLoss})
	if err != nil {
		return nil, fmt.Errorf("pubsub: %w", err)
	}
	c.lookup = l
	return c, nil
}

// WaitSynced waits for the Lookup's first copy of the lease table.
func (c *Client) WaitSynced(ctx context.Context) error { return c.lookup.WaitSynced(ctx) }

// Close ends the Client's subscriptions and its Lookup.
func (c *Client) Close() error {
	c.mu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	c.http.CloseIdleConnections()
	return c.lookup.Close()
}

// onLoss is the Lookup's loss upcall: each subscription whose topic lay in
// a lost range drops its stream and resubscribes at the topic's new Owner.
// Duty: act on loss notifications (All: every subscription), and do not
// block: it only cancels streams.
func (c *Client) onLoss(loss lookup.Loss) {
	lost := keyspace.NewRangeSet(loss.Ranges...)
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.subs {
		if loss.All || lost.Contains(s.key) {
			s.mu.Lock()
			s.lost = true
			s.current()
			s.mu.Unlock()
		}
	}
}

// backoff waits about d (drawn from [d/2, d)) or until ctx ends, and
// returns the next wait: doubled, up to 250 ms.
func backoff(ctx context.Context, d time.Duration) time.Duration {
	t := time.NewTimer(d/2 + rand.N(d/2))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return min(2*d, 250*time.Millisecond)
}

// Publish sends data to topic's Owner, retrying while there is no route,
// the Owner cannot be reached, or it refuses (owner.RefusalOf), until ctx
// ends. The message's ID is drawn once, so every retry is the same message.
func (c *Client) Publish(ctx context.Context, topic, data string) (Published, error) {
	var p Published
	path := "/pub/" + url.PathEscape(topic) + "?id=" + newID()
	for wait := 20 * time.Millisecond; ; wait = backoff(ctx, wait) {
		// Duty: Lookup returns a hint; a refusal is retried after a backoff.
		route, ok := c.lookup.Lookup(keyspace.KeyOf(topic))
		if !ok {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, err := http.NewRequestWithContext(actx, http.MethodPost, "http://"+route.Addr+path, strings.NewReader(data))
		var resp *http.Response
		if err == nil {
			resp, err = c.http.Do(req)
		}
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if _, refused := owner.RefusalOf(resp.StatusCode, resp.Header); !refused {
				cancel()
				if err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body)); resp.StatusCode == http.StatusOK {
					err = json.Unmarshal(body, &p)
				}
				return p, err
			}
		}
		cancel()
		if ctx.Err() != nil {
			return p, fmt.Errorf("pubsub: publish to %q: %w", topic, ctx.Err())
		}
	}
}

// Event is what a subscription reports, in order, on its goroutine. Kind
// is "subscribed" (a stream opened; New says the subscription was made
// afresh, so messages since the last stream may have been missed; Sent is
// when the request was sent), "message", "ended" (a stream ended; Reason
// says why) or "loss" (a loss notification covered the topic).
type Event struct {
	Kind, Owner, Reason string
	New                 bool
	Message             Message
	Sent                time.Time
}

// Subscription keeps one subscription open until Close.
type Subscription struct {
	c         *Client
	topic, id string
	key       keyspace.Key
	fn        func(Event)
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	mu        sync.Mutex
	current   context.CancelFunc // the open stream's; guarded by mu
	lost      bool               // a loss to report; guarded by mu
}

// Subscribe opens subscription id (unique per subscriber and topic) on
// topic and keeps it open: it reconnects when a stream ends, naming the
// last message received, and resubscribes on a loss notification. fn
// receives the events on the subscription's goroutine.
func (c *Client) Subscribe(topic, id string, fn func(Event)) *Subscription {
	s := &Subscription{c: c, topic: topic, id: id, key: keyspace.KeyOf(topic), fn: fn, done: make(chan struct{}),
		current: func() {}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	c.mu.Lock()
	c.subs[s] = true
	c.mu.Unlock()
	go s.run()
	return s
}

// Close ends the stream and waits for the subscription's goroutine. The
// server keeps the subscription for IdleTTL.
func (s *Subscription) Close() {
	s.cancel()
	<-s.done
	s.c.mu.Lock()
	delete(s.c.subs, s)
	s.c.mu.Unlock()
}

func (s *Subscription) run() {
	defer close(s.done)
	last := ""
	for wait := 20 * time.Millisecond; s.ctx.Err() == nil; wait = backoff(s.ctx, wait) {
		ctx, cancel := context.WithCancel(s.ctx)
		s.mu.Lock()
		s.current = cancel
		lost := s.lost
		s.lost = false
		s.mu.Unlock()
		if lost {
			s.fn(Event{Kind: "loss"})
		}
		opened, err := s.stream(ctx, &last)
		cancel()
		if opened {
			wait = 20 * time.Millisecond
		}
		if err != nil && s.ctx.Err() == nil {
			s.c.cfg.Logger.Debug("pubsub: stream failed", "topic", s.topic, "err", err)
		}
	}
}

// stream opens one stream at the topic's Owner and reads it to its end.
func (s *Subscription) stream(ctx context.Context, last *string) (opened bool, err error) {
	// Duty: Lookup returns a hint; a refusal is retried (run's backoff).
	route, ok := s.c.lookup.Lookup(s.key)
	if !ok {
		return false, errors.New("no owner holds the topic yet")
	}
	q := url.Values{"id": {s.id}}
	if *last != "" {
		q.Set("last", *last)
	}
	sent := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+route.Addr+"/sub/"+url.PathEscape(s.topic)+"?"+q.Encode(), nil)
	if err != nil {
		return false, err
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return false, fmt.Errorf("%s answered %s: %s", route.Addr, resp.Status, bytes.TrimSpace(body))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 2*MaxMessageBytes)
	event, reason := "", "eof"
	for sc.Scan() && err == nil {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		switch {
		case !ok:
		case event == "subscribed":
			var h Subscribed
			if err = json.Unmarshal([]byte(data), &h); err == nil {
				opened = true
				if h.New {
					*last = "" // every message of a new subscription is still to come
				}
				s.fn(Event{Kind: "subscribed", New: h.New, Owner: h.Owner, Sent: sent})
			}
		case event == "message":
			var m Message
			if err = json.Unmarshal([]byte(data), &m); err == nil {
				*last = m.ID
				s.fn(Event{Kind: "message", Message: m, Owner: route.Owner})
			}
		case event == "end":
			reason = data
		}
	}
	if err == nil {
		err = sc.Err()
	}
	if err != nil {
		reason = err.Error()
	}
	if opened {
		s.fn(Event{Kind: "ended", Reason: reason, Owner: route.Owner})
	}
	return opened, err
}
