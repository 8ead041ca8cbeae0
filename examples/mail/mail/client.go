package mail

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	mrand "math/rand/v2"

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

// Client is a delivery and retrieval proxy: it sends each request to the
// Owner of the user's key, found with the Lookup library, retrying while
// ownership moves or the mail map is rebuilt. Duty (act on loss
// notifications): the mail is durable and the mail map is rebuilt by the
// Owner, so a frontend has nothing to republish; it sets no OnLoss.
type Client struct {
	lookup *lookup.Lookup
	http   *http.Client
}

// NewClient starts a Client and its Lookup.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Manager == "" {
		return nil, errors.New("mail: ClientConfig.Manager is required")
	}
	l, err := lookup.New(ctx, lookup.Config{Manager: cfg.Manager, Namespace: cfg.Namespace, Timing: cfg.Timing, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("mail: %w", err)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &Client{lookup: l, http: &http.Client{Transport: t, Timeout: 5 * time.Second}}, nil
}

// WaitSynced waits for the Lookup's first copy of the lease table.
func (c *Client) WaitSynced(ctx context.Context) error { return c.lookup.WaitSynced(ctx) }

// Close stops the Lookup.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return c.lookup.Close()
}

// Deliver stores body in user's mailbox and returns the message's ID,
// drawn once: every retry is the same message.
func (c *Client) Deliver(ctx context.Context, user, body string) (string, error) {
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	_, err := c.do(ctx, http.MethodPost, user, "?id="+id, body)
	return id, err
}

// Read gathers user's messages from the nodes that hold them.
func (c *Client) Read(ctx context.Context, user string) (Mailbox, error) {
	var box Mailbox
	data, err := c.do(ctx, http.MethodGet, user, "", "")
	if err == nil {
		err = json.Unmarshal(data, &box)
	}
	return box, err
}

// do sends one request to user's Owner, retrying with backoff while there
// is no route, the Owner cannot be reached, or it answers 421 or 5xx.
func (c *Client) do(ctx context.Context, method, user, query, body string) ([]byte, error) {
	path := "/mail/" + url.PathEscape(user) + query
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 250*time.Millisecond) {
		data, retry, err := c.attempt(ctx, method, user, path, body)
		if err == nil || !retry {
			return data, err
		}
		t := time.NewTimer(wait/2 + mrand.N(wait/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("mail: %s %s: %w; last: %w", method, path, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (c *Client) attempt(ctx context.Context, method, user, path, body string) ([]byte, bool, error) {
	// Duty: Lookup returns a hint; the Owner refuses a stale one, and do
	// retries after a short backoff.
	route, ok := c.lookup.Lookup(keyspace.KeyOf(user))
	if !ok {
		return nil, true, errors.New("no owner holds the user yet")
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+route.Addr+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return nil, false, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, true, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, true, err
	}
	if code := resp.StatusCode; code/100 != 2 {
		// A refusal (owner.RefusalOf) or a node's failure may pass.
		_, refused := owner.RefusalOf(code, resp.Header)
		return nil, refused || code >= 500,
			fmt.Errorf("%s at %s answered %s: %s", route.Owner, route.Addr, resp.Status, bytes.TrimSpace(data))
	}
	return data, false, nil
}
