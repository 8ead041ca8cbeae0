package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/protocol"
)

// ErrNotFound is returned by Get when the key's owner holds no value for it:
// none was put, or it was lost with an earlier owner (soft state).
var ErrNotFound = errors.New("kv: not found")

// Retry backoff bounds: the first wait is about backoffMin, and each retry
// doubles it up to backoffMax. Each wait is drawn from [d/2, d).
const (
	backoffMin = 20 * time.Millisecond
	backoffMax = 500 * time.Millisecond
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Manager is the Manager's address, host:port, or a replicated
	// Manager's replicas' addresses, comma-separated (see the Manager field
	// of lookup.Config and owner.Config). Required.
	Manager string
	// Namespace is the key space to follow; empty means "default".
	Namespace string
	// Timing is the Lookup's timing until the Manager's arrives; the zero
	// value means protocol.Production(). The Lookup adopts the Manager's
	// timings in any case.
	Timing protocol.Timing
	// HTTPClient sends the requests; nil means a client of the Client's own
	// (closed by Close) with a 5 s timeout per attempt.
	HTTPClient *http.Client
	// MaxAttempts bounds the attempts of one Put or Get; 0 means no bound
	// (retry until ctx ends or Timeout passes).
	MaxAttempts int
	// Timeout bounds one Put or Get, retries included, besides ctx; 0 means
	// ctx alone.
	Timeout time.Duration
	// Logger receives the Client's and its Lookup's logs (retries at debug
	// level); nil discards them.
	Logger *slog.Logger
	// CertsDir, if set, is the certificates directory (leasehold cert):
	// the Lookup dials the Manager with the lookup certificate there, and
	// the Client's own HTTP client sends HTTPS with it to servers that
	// present owner certificates naming their host.
	CertsDir string
	// Insecure, without CertsDir, dials the Manager and the servers in
	// plaintext (lookup.Config.Insecure). One of the two is required.
	Insecure bool

	net network // nil: the host's TCP (network.go)
}

// Client sends each request to the server that owns its key, found with the
// Lookup library, and retries while ownership moves. It is safe for
// concurrent use.
type Client struct {
	cfg      ClientConfig
	lookup   *lookup.Lookup
	http     *http.Client
	ownsHTTP bool
	scheme   string // of the servers' URLs: http or https

	ops, retries, failed atomic.Int64
}

// ClientStats counts a Client's operations: Ops Puts and Gets, Retries the
// attempts after the first (no route, unreachable server, 421 not the
// owner, 503 moving), and Failed the operations that returned an error
// other than ErrNotFound.
type ClientStats struct {
	Ops, Retries, Failed int64
}

// Stats returns the Client's counts so far.
func (c *Client) Stats() ClientStats {
	return ClientStats{Ops: c.ops.Load(), Retries: c.retries.Load(), Failed: c.failed.Load()}
}

// NewClient starts a Client: its Lookup begins to follow the Manager's lease
// table at once. Put and Get wait for routes by retrying; WaitSynced waits
// for the first copy of the table.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Manager == "" {
		return nil, errors.New("kv: ClientConfig.Manager (the Manager's address) is required")
	}
	if cfg.MaxAttempts < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("kv: ClientConfig.MaxAttempts (%d) and Timeout (%s) must not be negative", cfg.MaxAttempts, cfg.Timeout)
	}
	if cfg.CertsDir == "" && !cfg.Insecure {
		return nil, errors.New("kv: set ClientConfig.CertsDir to dial with mutual TLS, or Insecure: true for plaintext")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := lookup.New(ctx, lookup.Config{
		Connection: leasehold.Connection{
			Manager:     cfg.Manager,
			Namespace:   cfg.Namespace,
			Timing:      cfg.Timing,
			Logger:      cfg.Logger,
			CertsDir:    cfg.CertsDir,
			Insecure:    cfg.Insecure,
			DialOptions: dialOptions(cfg.net),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	c := &Client{cfg: cfg, lookup: l, http: cfg.HTTPClient}
	src, err := certs.OpenIfSet(cfg.CertsDir, certs.Lookup, "")
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("kv: %w", err)
	}
	t, scheme := certs.DialHTTP(src, certs.Owner)
	c.scheme = scheme
	dialOver(t, cfg.net)
	if c.http == nil {
		c.http = &http.Client{Transport: t, Timeout: 5 * time.Second}
		c.ownsHTTP = true
	}
	return c, nil
}

// WaitSynced waits until the Client's Lookup holds its first copy of the
// lease table, or ctx ends. Its error then says why no copy came: the
// Manager could not be reached (the dial or TLS error), it refused, or it
// did not answer.
func (c *Client) WaitSynced(ctx context.Context) error {
	err := c.lookup.WaitSynced(ctx)
	if err == nil {
		return nil
	}
	if merr := c.lookup.ManagerError(); merr != nil {
		return fmt.Errorf("kv: no copy of the lease table: %w", merr)
	}
	return fmt.Errorf("kv: no copy of the lease table from the manager at %s: %w", c.cfg.Manager, err)
}

// ManagerError returns why the Client's Lookup last failed to reach the
// Manager, or nil while it is connected (lookup.Lookup.ManagerError).
func (c *Client) ManagerError() error { return c.lookup.ManagerError() }

// Close stops the Lookup and closes the idle connections of the Client's own
// HTTP client.
func (c *Client) Close() error {
	if c.ownsHTTP {
		c.http.CloseIdleConnections()
	}
	return c.lookup.Close()
}

// Put stores value under key at the key's owner.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	if len(value) > MaxValueBytes {
		return fmt.Errorf("kv: put %q: value of %d bytes is larger than %d", key, len(value), MaxValueBytes)
	}
	_, err := c.do(ctx, http.MethodPut, key, value)
	return err
}

// Get returns the value stored under key at the key's owner, or ErrNotFound
// when the owner has none. Only an answer from the server that holds the
// key's lease counts, so Get never returns a value older than the last Put
// that the owner at the time accepted.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, key, nil)
}

// do sends one request, retrying with jittered backoff while there is no
// route, the server cannot be reached, or it answers 421 or 5xx (503 while
// the key's range moves to another server with its state).
func (c *Client) do(ctx context.Context, method, key string, body []byte) ([]byte, error) {
	c.ops.Add(1)
	value, err := c.doRetry(ctx, method, key, body)
	if err != nil && !errors.Is(err, ErrNotFound) {
		c.failed.Add(1)
	}
	return value, err
}

func (c *Client) doRetry(ctx context.Context, method, key string, body []byte) ([]byte, error) {
	op := strings.ToLower(method)
	if key == "" {
		return nil, fmt.Errorf("kv: %s: empty key", op)
	}
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	k := keyspace.KeyOf(key)
	path := "/kv/" + url.PathEscape(key)
	wait := backoffMin
	for attempt := 1; ; attempt++ {
		value, retry, err := c.attempt(ctx, method, k, path, body)
		if !retry {
			if err != nil && !errors.Is(err, ErrNotFound) {
				err = fmt.Errorf("kv: %s %q: %w", op, key, err)
			}
			return value, err
		}
		if c.cfg.MaxAttempts > 0 && attempt >= c.cfg.MaxAttempts {
			return nil, fmt.Errorf("kv: %s %q: giving up after %d attempts: %w", op, key, attempt, err)
		}
		c.cfg.Logger.Debug("kv: retrying", "op", op, "key", key, "attempt", attempt, "cause", err)
		t := time.NewTimer(wait/2 + rand.N(wait/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("kv: %s %q: %w after %d attempts; last: %w", op, key, ctx.Err(), attempt, err)
		case <-t.C:
		}
		c.retries.Add(1)
		wait = min(2*wait, backoffMax)
	}
}

// attempt sends one request to the key's owner as the Lookup sees it now.
// retry reports whether the failure may pass once ownership settles.
func (c *Client) attempt(ctx context.Context, method string, k keyspace.Key, path string, body []byte) (value []byte, retry bool, err error) {
	route, ok := c.lookup.Lookup(k)
	if !ok {
		if c.lookup.LSN() == 0 {
			if merr := c.lookup.ManagerError(); merr != nil {
				return nil, true, fmt.Errorf("no route: no copy of the lease table yet: %w", merr)
			}
			return nil, true, fmt.Errorf("no route: the copy of the lease table is empty (is the manager at %s up?)", c.cfg.Manager)
		}
		return nil, true, errors.New("no owner holds the key yet")
	}
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+route.Addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, true, fmt.Errorf("owner %s at %s: %w", route.Owner, route.Addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueBytes+1))
	if err != nil {
		return nil, true, fmt.Errorf("owner %s at %s: reading the answer: %w", route.Owner, route.Addr, err)
	}
	switch code := resp.StatusCode; {
	case method == http.MethodGet && code == http.StatusOK:
		return data, false, nil
	case method == http.MethodPut && (code == http.StatusNoContent || code == http.StatusOK):
		return nil, false, nil
	case method == http.MethodGet && code == http.StatusNotFound:
		return nil, false, ErrNotFound
	default:
		err := fmt.Errorf("owner %s at %s answered %s: %s", route.Owner, route.Addr, resp.Status, firstLine(data))
		return nil, code == http.StatusMisdirectedRequest || code >= 500, err
	}
}

// firstLine returns the start of an error body, for messages.
func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
