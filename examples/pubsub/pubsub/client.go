package pubsub

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// ClientConfig configures a Client; Manager is required (lookup.Config).
type ClientConfig struct {
	Manager, Namespace string
	Timing             protocol.Timing
	// CertsDir (leasehold cert) holds lookup.<CertName>.crt, or the only one:
	// mutual TLS to the Manager and the servers. Insecure: plaintext. One is required.
	CertsDir, CertName string
	Insecure           bool
}

// Client is a frontend: it publishes to a topic's Owner and keeps
// subscriptions open there, found with the Lookup library (P§2.1).
type Client struct {
	lookup *lookup.Lookup
	http   *http.Client
	scheme string          // of the servers' URLs: http, or https with CertsDir
	ctx    context.Context // the subscriptions'; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the subscriptions' goroutines
	mu     sync.Mutex
	subs   map[*Subscription]context.CancelFunc // each one's open stream; guarded by mu
}

// NewClient starts a Client and its Lookup.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	src, err := certs.OpenIfSet(cfg.CertsDir, certs.Lookup, cfg.CertName) // nil: plain HTTP
	if err != nil {
		return nil, fmt.Errorf("pubsub: %w", err)
	}
	c := &Client{subs: map[*Subscription]context.CancelFunc{}, http: &http.Client{}}
	c.http.Transport, c.scheme = certs.DialHTTP(src, certs.Owner) // to the servers' owner certificates
	if c.lookup, err = lookup.New(ctx, lookup.Config{
		Connection: leasehold.Connection{
			Manager:   cfg.Manager,
			Namespace: cfg.Namespace,
			Timing:    cfg.Timing,
			CertsDir:  cfg.CertsDir,
			Insecure:  cfg.Insecure,
		},
		OnLoss:   c.onLoss,
		CertName: cfg.CertName,
	}); err != nil {
		return nil, fmt.Errorf("pubsub: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// WaitSynced waits for the Lookup's first copy of the lease table.
func (c *Client) WaitSynced(ctx context.Context) error { return c.lookup.WaitSynced(ctx) }

// Close ends the Client's subscriptions and its Lookup.
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	c.http.CloseIdleConnections()
	return c.lookup.Close()
}

// onLoss is the Lookup's loss upcall. Duty: act on loss notifications —
// each subscription whose topic lay in a lost range (all, with loss.All)
// resubscribes at the topic's Owner; and never block (it only cancels).
func (c *Client) onLoss(loss lookup.Loss) {
	lost := keyspace.NewRangeSet(loss.Ranges...)
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, cancel := range c.subs {
		if loss.All || lost.Contains(s.key) {
			cancel()
		}
	}
}

// backoff waits about d (drawn from [d/2, d)) or until ctx ends, and
// returns the next wait: doubled, up to 250 ms.
func backoff(ctx context.Context, d time.Duration) time.Duration {
	select {
	case <-ctx.Done():
	case <-time.After(d/2 + mrand.N(d/2)):
	}
	return min(2*d, 250*time.Millisecond)
}

// do sends one request to the Owner of key, retrying until ctx ends while
// there is no route, the Owner cannot be reached or it refuses
// (owner.RefusalOf). Duty: a route is a hint; retry after a short backoff.
func (c *Client) do(ctx context.Context, key keyspace.Key, method, path, body string) (*http.Response, error) {
	for wait := 20 * time.Millisecond; ctx.Err() == nil; wait = backoff(ctx, wait) {
		route, ok := c.lookup.Lookup(key)
		if !ok {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+route.Addr+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		if resp, err := c.http.Do(req); err == nil {
			if _, refused := owner.RefusalOf(resp.StatusCode, resp.Header); !refused {
				return resp, nil
			}
			resp.Body.Close()
		}
	}
	return nil, ctx.Err()
}

// Publish sends data to topic's Owner, retrying as do does. The message's
// ID is drawn once, so every retry is the same message.
func (c *Client) Publish(ctx context.Context, topic, data string) (p Published, err error) {
	resp, err := c.do(ctx, keyspace.KeyOf(topic), http.MethodPost, "/pub/"+url.PathEscape(topic)+"?id="+rand.Text(), data)
	if err != nil {
		return p, fmt.Errorf("pubsub: publish to %q: %w", topic, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return p, fmt.Errorf("pubsub: publish to %q: %s: %s", topic, resp.Status, bytes.TrimSpace(body))
	}
	return p, json.Unmarshal(body, &p)
}

// Event is the data of each server-sent event (doc.go), and what a
// subscription reports, in order, on its goroutine: "subscribed", "message",
// and "ended" (Reason: as "end"'s, or the connection's error) for "end".
type Event struct {
	Kind    string    `json:"kind"`
	Owner   string    `json:"owner,omitzero"`
	New     bool      `json:"new,omitzero"`
	Message Message   `json:"message,omitzero"`
	Reason  string    `json:"reason,omitzero"`
	Sent    time.Time `json:"-"` // "subscribed": when the request was sent
}

// Subscription keeps one subscription open until Close.
type Subscription struct {
	c         *Client
	topic, id string
	key       keyspace.Key
	fn        func(Event)
	cancel    context.CancelFunc
	done      chan struct{}
}

// Subscribe opens subscription id (unique per subscriber and topic) on
// topic and keeps it open: it reconnects when a stream ends, naming the
// last message received, and resubscribes on a loss notification.
func (c *Client) Subscribe(topic, id string, fn func(Event)) *Subscription {
	s := &Subscription{c: c, topic: topic, id: id, key: keyspace.KeyOf(topic), fn: fn, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(c.ctx)
	s.cancel = cancel
	c.wg.Go(func() {
		defer close(s.done)
		last := ""
		for wait := 20 * time.Millisecond; ctx.Err() == nil; wait = backoff(ctx, wait) {
			sctx, cancel := context.WithCancel(ctx)
			c.mu.Lock()
			c.subs[s] = cancel
			c.mu.Unlock()
			if s.stream(sctx, &last) {
				wait = 20 * time.Millisecond
			}
			cancel()
		}
		c.mu.Lock()
		delete(c.subs, s)
		c.mu.Unlock()
	})
	return s
}

// Close ends the stream and its goroutine; the server keeps it IdleTTL.
func (s *Subscription) Close() {
	s.cancel()
	<-s.done
}

// stream opens one stream at the topic's Owner and reads it to its end;
// it reports whether one opened.
func (s *Subscription) stream(ctx context.Context, last *string) (opened bool) {
	sent := time.Now()
	resp, err := s.c.do(ctx, s.key, http.MethodGet, "/sub/"+url.PathEscape(s.topic)+"?"+url.Values{"id": {s.id}, "last": {*last}}.Encode(), "")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 2*MaxMessageBytes)
	reason, from := "eof", ""
	for resp.StatusCode == http.StatusOK && sc.Scan() {
		var e Event
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); !ok || json.Unmarshal([]byte(data), &e) != nil {
			continue
		}
		switch e.Kind {
		case "subscribed":
			opened, from, e.Sent = true, e.Owner, sent
			if e.New {
				*last = "" // every message of a new subscription is still to come
			}
		case "message":
			*last, e.Owner = e.Message.ID, from
		case "end":
			reason = e.Reason
			continue
		}
		s.fn(e)
	}
	if sc.Err() != nil {
		reason = sc.Err().Error()
	}
	if opened {
		s.fn(Event{Kind: "ended", Reason: reason, Owner: from})
	}
	return opened
}
