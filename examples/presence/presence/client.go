package presence

import (
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
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
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
	// CertsDir is the certificates directory (leasehold cert): the Lookup
	// dials the Manager with its lookup certificate (lookup.<CertName>.crt,
	// or the only one), and the client reaches the servers over HTTPS with
	// it, accepting only owner certificates that name the server's host.
	CertsDir, CertName string
	// Insecure, without CertsDir, dials the Manager and the servers in
	// plaintext (lookup.Config.Insecure). One of the two is required.
	Insecure bool
}

// Client is a frontend for devices and for queries: it sends each request
// to the Owner of the user's key, found with the Lookup library, retrying
// while ownership moves; on a loss notification it republishes the last
// heartbeat of every device of the users lost (P§2.1).
type Client struct {
	cfg     ClientConfig
	lookup  *lookup.Lookup
	http    *http.Client
	scheme  string // of the servers' URLs: http, or https with CertsDir
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	devices map[*DeviceHandle]bool // guarded by mu
}

// NewClient starts a Client and its Lookup.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Manager == "" {
		return nil, errors.New("presence: ClientConfig.Manager is required")
	}
	if cfg.CertsDir == "" && !cfg.Insecure {
		return nil, errors.New("presence: set ClientConfig.CertsDir to dial with mutual TLS, or Insecure: true for plaintext")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	src, err := certs.OpenIfSet(cfg.CertsDir, certs.Lookup, cfg.CertName)
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	c := &Client{cfg: cfg, devices: map[*DeviceHandle]bool{}}
	t, scheme := certs.DialHTTP(src, certs.Owner)
	t.MaxIdleConnsPerHost = 256 // for many concurrent devices (the default keeps 2)
	c.http, c.scheme = &http.Client{Transport: t, Timeout: 5 * time.Second}, scheme
	c.ctx, c.cancel = context.WithCancel(context.Background())
	l, err := lookup.New(ctx, lookup.Config{
		Connection: leasehold.Connection{
			Manager:   cfg.Manager,
			Namespace: cfg.Namespace,
			Timing:    cfg.Timing,
			Logger:    cfg.Logger,
			CertsDir:  cfg.CertsDir,
			Insecure:  cfg.Insecure,
		},
		OnLoss:   c.onLoss,
		CertName: cfg.CertName,
	})
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	c.lookup = l
	return c, nil
}

// WaitSynced waits for the Lookup's first copy of the lease table.
func (c *Client) WaitSynced(ctx context.Context) error { return c.lookup.WaitSynced(ctx) }

// Close stops republishing and the Lookup.
func (c *Client) Close() error {
	c.cancel()
	err := c.lookup.Close()
	c.wg.Wait()
	c.http.CloseIdleConnections()
	return err
}

// onLoss republishes, each on its own goroutine, the last heartbeat of the
// devices whose users lay in a lost range: the new Owner has nothing.
// Duty: act on loss notifications (All: every device), and never block
// the Lookup's upcalls (the republishing runs on other goroutines). A
// device already republishing is skipped, and each try is bounded, so a
// Lookup cut off from the Manager (a loss of everything, repeated) does
// not pile them up.
func (c *Client) onLoss(loss lookup.Loss) {
	lost := keyspace.NewRangeSet(loss.Ranges...)
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := range c.devices {
		if (loss.All || lost.Contains(d.key)) && d.republishing.CompareAndSwap(false, true) {
			c.wg.Go(func() {
				defer d.republishing.Store(false)
				ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
				defer cancel()
				if err := d.republish(ctx); err != nil && c.ctx.Err() == nil {
					c.cfg.Logger.Warn("presence: republishing failed", "user", d.user, "device", d.name, "err", err)
				}
			})
		}
	}
}

// DeviceHandle is one device's heartbeats. Beat is not safe for
// concurrent use on one handle (a device sends one heartbeat at a time).
type DeviceHandle struct {
	c          *Client
	user, name string
	key        keyspace.Key
	mu         sync.Mutex
	seq        uint64 // the last sent; guarded by mu
	status     string // the last sent's; guarded by mu
	// republishing is set while a republish is under way.
	republishing atomic.Bool
}

// Device returns the handle of device of user; the Client republishes its
// last heartbeat after a loss, until Forget.
func (c *Client) Device(user, device string) *DeviceHandle {
	d := &DeviceHandle{c: c, user: user, name: device, key: keyspace.KeyOf(user)}
	c.mu.Lock()
	c.devices[d] = true
	c.mu.Unlock()
	return d
}

// Forget stops republishing d's heartbeats.
func (d *DeviceHandle) Forget() {
	d.c.mu.Lock()
	delete(d.c.devices, d)
	d.c.mu.Unlock()
}

// Beat sends a heartbeat with status and the next counter, retrying until
// it is acknowledged or ctx ends, and returns its counter.
func (d *DeviceHandle) Beat(ctx context.Context, status string) (uint64, error) {
	d.mu.Lock()
	d.seq++
	seq := d.seq
	d.status = status
	d.mu.Unlock()
	if err := d.send(ctx, status, seq); err != nil {
		return seq, err
	}
	return seq, nil
}

// republish sends the last heartbeat sent again, acknowledged or still on
// its way: the loss notification may arrive before the answer to a
// heartbeat the old Owner stored and acknowledged just before it lost the
// user; republishing only the last acknowledged one would then leave the
// new Owner an older status than the device was told is stored. The
// servers keep the higher counter, so a heartbeat sent twice is harmless.
func (d *DeviceHandle) republish(ctx context.Context) error {
	d.mu.Lock()
	seq, status := d.seq, d.status
	d.mu.Unlock()
	if seq == 0 {
		return nil
	}
	return d.send(ctx, status, seq)
}

func (d *DeviceHandle) send(ctx context.Context, status string, seq uint64) error {
	u := "/presence/" + url.PathEscape(d.user) + "/" + url.PathEscape(d.name) + fmt.Sprintf("?seq=%d", seq)
	_, err := d.c.do(ctx, http.MethodPut, d.key, u, status)
	return err
}

// Query asks the Owner of user's key which of the user's devices are
// online. The answer never carries a status older than the last heartbeat
// acknowledged before Query was called.
func (c *Client) Query(ctx context.Context, user string) (Answer, error) {
	var a Answer
	body, err := c.do(ctx, http.MethodGet, keyspace.KeyOf(user), "/presence/"+url.PathEscape(user), "")
	if err == nil {
		err = json.Unmarshal(body, &a)
	}
	return a, err
}

// do sends one request to k's Owner, retrying with backoff while there is
// no route, the Owner cannot be reached, or it answers 421 or 5xx.
func (c *Client) do(ctx context.Context, method string, k keyspace.Key, path, body string) ([]byte, error) {
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 250*time.Millisecond) {
		data, retry, err := c.attempt(ctx, method, k, path, body)
		if err == nil || !retry {
			return data, err
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("presence: %s %s: %w; last: %w", method, path, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (c *Client) attempt(ctx context.Context, method string, k keyspace.Key, path, body string) ([]byte, bool, error) {
	// Duty: Lookup returns a hint; the Owner refuses a stale one
	// (owner.RefusalOf), and do retries after a short backoff.
	route, ok := c.lookup.Lookup(k)
	if !ok {
		return nil, true, errors.New("no owner holds the user yet")
	}
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+route.Addr+path, strings.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, true, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, true, err
	}
	if code := resp.StatusCode; code/100 != 2 {
		_, refused := owner.RefusalOf(code, resp.Header)
		return nil, refused, fmt.Errorf("%s at %s answered %s: %s", route.Owner, route.Addr, resp.Status, bytes.TrimSpace(data))
	}
	return data, false, nil
}
