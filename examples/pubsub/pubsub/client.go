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
	"github.com/leasehold/leasehold/protocol"
)

// Retry backoff: the first wait about backoffMin, doubling to backoffMax,
// each drawn from [d/2, d).
const (
	backoffMin = 20 * time.Millisecond
	backoffMax = 250 * time.Millisecond
)

// ClientConfig configures a Client.
type ClientConfig struct {
	Manager   string // the Manager's address, or its replicas', comma-separated; required
	Namespace string
	Timing    protocol.Timing
	Logger    *slog.Logger
}

// Client is a frontend: it publishes to a topic's Owner and keeps
// subscriptions open there, found with the Lookup library. On a loss
// notification covering a subscription's topic it resubscribes (P§2.1).
type Client struct {
	cfg    ClientConfig
	lookup *lookup.Lookup
	pub    *http.Client // bounded per attempt
	stream *http.Client // no timeout: streams stay open

	mu   sync.Mutex
	subs map[*Subscription]bool // guarded by mu
}

// NewClient starts a Client and its Lookup.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Manager == "" {
		return nil, errors.New("pubsub: ClientConfig.Manager is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	c := &Client{cfg: cfg, subs: map[*Subscription]bool{},
		pub: &http.Client{Transport: tr, Timeout: 5 * time.Second}, stream: &http.Client{Transport: tr}}
	l, err := lookup.New(ctx, lookup.Config{Manager: cfg.Manager, Namespace: cfg.Namespace, Timing: cfg.Timing,
		Logger: cfg.Logger, OnLoss: c.onLoss})
	if err != nil {
		return nil, fmt.Errorf("pubsub: %w", err)
	}
	c.lookup = l
	return c, nil
}

// WaitSynced waits for the Lookup's first copy of the lease table.
func (c *Client) WaitSynced(ctx context.Context) error { return c.lookup.WaitSynced(ctx) }

// Close stops the Client's subscriptions and its Lookup.
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
	c.pub.Transport.(*http.Transport).CloseIdleConnections()
	return c.lookup.Close()
}

// onLoss is the Lookup's loss upcall: every subscription whose topic lay in
// a lost range drops its stream and resubscribes, so it is receiving again
// at the topic's new Owner within the notification bound.
func (c *Client) onLoss(loss lookup.Loss) {
	lost := keyspace.NewRangeSet(loss.Ranges...)
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.subs {
		if loss.All || lost.Contains(s.key) {
			s.resubscribe()
		}
	}
}

// Publish sends data to topic's Owner, retrying while ownership moves, and
// returns the server's answer. The message's ID is drawn at random, once,
// so a retry is the same message.
func (c *Client) Publish(ctx context.Context, topic, data string) (Published, error) {
	var p Published
	id := newID()
	u := "/pub/" + url.PathEscape(topic) + "?id=" + id
	err := c.retry(ctx, topic, func(addr string) (bool, error) {
		resp, err := c.pub.Post("http://"+addr+u, "application/octet-stream", strings.NewReader(data))
		if err != nil {
			return true, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode == http.StatusMisdirectedRequest || resp.StatusCode >= 500,
				fmt.Errorf("%s answered %s: %s", addr, resp.Status, bytes.TrimSpace(body))
		}
		return false, json.Unmarshal(body, &p)
	})
	return p, err
}

// retry runs attempt against the topic's Owner as the Lookup sees it, with
// backoff while it fails with retry set, until ctx ends.
func (c *Client) retry(ctx context.Context, topic string, attempt func(addr string) (retry bool, err error)) error {
	k := keyspace.KeyOf(topic)
	wait := backoffMin
	for {
		route, ok := c.lookup.Lookup(k)
		retry, err := true, errors.New("no owner holds the topic yet")
		if ok {
			retry, err = attempt(route.Addr)
		}
		if err == nil || !retry {
			if err != nil {
				err = fmt.Errorf("pubsub: %q: %w", topic, err)
			}
			return err
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pubsub: %q: %w; last: %w", topic, ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, backoffMax)
	}
}

// Event is what a subscription reports, in order, on one goroutine.
type Event struct {
	// Kind is "subscribed" (a stream opened; New says the subscription was
	// made afresh, so messages may have been missed since the last
	// stream), "message", "ended" (a stream ended: Reason says why), or
	// "loss" (a loss notification covered the topic; a new stream follows).
	Kind    string
	New     bool
	Owner   string
	Message Message
	Reason  string
	// Sent is when the request that opened the stream was sent.
	Sent time.Time
}

// Subscription keeps one subscription open until Close.
type Subscription struct {
	c      *Client
	topic  string
	id     string
	key    keyspace.Key
	fn     func(Event)
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	current context.CancelFunc // the open stream's; guarded by mu
	lost    bool               // a loss arrived: report it; guarded by mu
}

// Subscribe opens subscription id (unique per subscriber and topic) on
// topic and keeps it open: it reconnects when a stream ends, resuming after
// the last message received, and resubscribes on a loss notification. fn
// receives the events on the subscription's goroutine.
func (c *Client) Subscribe(topic, id string, fn func(Event)) *Subscription {
	s := &Subscription{c: c, topic: topic, id: id, key: keyspace.KeyOf(topic), fn: fn, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	c.mu.Lock()
	c.subs[s] = true
	c.mu.Unlock()
	go s.run()
	return s
}

// Close ends the subscription's stream and waits for its goroutine. The
// server keeps the subscription for IdleTTL.
func (s *Subscription) Close() {
	s.cancel()
	<-s.done
	s.c.mu.Lock()
	delete(s.c.subs, s)
	s.c.mu.Unlock()
}

func (s *Subscription) resubscribe() {
	s.mu.Lock()
	s.lost = true
	if s.current != nil {
		s.current()
	}
	s.mu.Unlock()
}

func (s *Subscription) run() {
	defer close(s.done)
	last := ""
	wait := backoffMin
	for s.ctx.Err() == nil {
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
			wait = backoffMin
		}
		if err != nil && s.ctx.Err() == nil {
			s.c.cfg.Logger.Debug("pubsub: stream failed", "topic", s.topic, "err", err)
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2))
		select {
		case <-s.ctx.Done():
		case <-t.C:
		}
		t.Stop()
		wait = min(2*wait, backoffMax)
	}
}

// stream opens one stream and reads it to its end.
func (s *Subscription) stream(ctx context.Context, last *string) (opened bool, err error) {
	route, ok := s.c.lookup.Lookup(s.key)
	if !ok {
		return false, errors.New("no owner holds the topic yet")
	}
	q := url.Values{"id": {s.id}}
	if *last != "" {
		q.Set("last", *last)
	}
	sent := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"http://"+route.Addr+"/sub/"+url.PathEscape(s.topic)+"?"+q.Encode(), nil)
	if err != nil {
		return false, err
	}
	resp, err := s.c.stream.Do(req)
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
	var event, data string
	reason := "eof"
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		case line == "" && event != "":
			switch event {
			case "subscribed":
				var h Subscribed
				if err := json.Unmarshal([]byte(data), &h); err != nil {
					return opened, err
				}
				opened = true
				if h.New {
					*last = "" // the new subscription's messages are all still to come
				}
				s.fn(Event{Kind: "subscribed", New: h.New, Owner: h.Owner, Sent: sent})
			case "message":
				var m Message
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					return opened, err
				}
				*last = m.ID
				s.fn(Event{Kind: "message", Message: m, Owner: route.Owner})
			case "end":
				reason = data
			}
			event, data = "", ""
		}
	}
	if err := sc.Err(); err != nil {
		reason = err.Error()
	}
	if opened {
		s.fn(Event{Kind: "ended", Reason: reason, Owner: route.Owner})
	}
	return opened, nil
}
