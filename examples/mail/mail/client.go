package mail

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/gateway"
	"github.com/leasehold/leasehold/protocol"
)

// ClientConfig configures a Client; Manager is required.
type ClientConfig struct {
	Manager, Namespace string
	Timing             protocol.Timing
	// CertsDir (leasehold cert): the gateway dials with lookup.<CertName>.crt
	// (or the only one). Insecure, without it, dials in plaintext.
	CertsDir, CertName string
	Insecure           bool
}

// Client is a delivery and retrieval proxy: an in-process gateway sends
// each request to the Owner of the user's key and retries its refusals
// within the caller's deadline (the Lookup caller's duties: a route is a
// hint; back off, then retry). The mail is durable and the Owner rebuilds
// the map, so on a loss notification there is nothing to republish.
type Client struct {
	gw *gateway.Gateway
}

// NewClient starts a Client and its gateway.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Manager == "" {
		return nil, errors.New("mail: ClientConfig.Manager is required")
	}
	src, err := certs.OpenIfSet(cfg.CertsDir, certs.Lookup, cfg.CertName)
	if err != nil {
		return nil, fmt.Errorf("mail: %w", err)
	}
	g, err := gateway.New(ctx, gateway.Config{Manager: cfg.Manager, Timing: cfg.Timing, Certs: src, Insecure: cfg.Insecure && src == nil, MaxBodyBytes: MaxMessageBytes,
		Routes: []gateway.Route{{Name: "mail", Prefix: "/mail/", Namespace: cfg.Namespace, Key: "path:1",
			Timeout: gateway.Duration(time.Hour)}}}) // the caller's ctx bounds each request
	if err != nil {
		return nil, fmt.Errorf("mail: %w", err)
	}
	return &Client{gw: g}, nil
}

// Close stops the gateway.
func (c *Client) Close() error { return c.gw.Close() }

// Deliver stores body in user's mailbox and returns the message's ID,
// drawn once: every retry (Idempotency-Key) is the same message.
func (c *Client) Deliver(ctx context.Context, user, body string) (string, error) {
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	_, err := c.do(ctx, http.MethodPost, "/mail/"+url.PathEscape(user)+"?id="+id, body, id)
	return id, err
}

// Read gathers user's messages from the nodes that hold them.
func (c *Client) Read(ctx context.Context, user string) (Mailbox, error) {
	var box Mailbox
	data, err := c.do(ctx, http.MethodGet, "/mail/"+url.PathEscape(user), "", "")
	if err == nil {
		err = json.Unmarshal(data, &box)
	}
	return box, err
}

// do sends one request through the gateway and returns the answer's body.
func (c *Client) do(ctx context.Context, method, path, body, idempotencyKey string) ([]byte, error) {
	req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	w := httptest.NewRecorder()
	c.gw.ServeHTTP(w, req)
	if ctx.Err() != nil { // the gateway gave up without an answer
		return nil, fmt.Errorf("mail: %s %s: %w", method, path, ctx.Err())
	}
	if w.Code/100 != 2 {
		return nil, fmt.Errorf("mail: %s %s: %d %s", method, path, w.Code, bytes.TrimSpace(w.Body.Bytes()))
	}
	return w.Body.Bytes(), nil
}
