package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// Config configures a Gateway. Zero limits take the defaults.
type Config struct {
	// Manager is the Manager's address, or its replicas', comma-separated,
	// as in lookup.Config. Required unless NewRouter is set.
	Manager string
	// Routes are the routes served; at least one.
	Routes []Route
	// MaxKeyBytes, MaxBodyBytes: see DefaultMaxKeyBytes, DefaultMaxBodyBytes.
	MaxKeyBytes  int
	MaxBodyBytes int64
	// MaxInFlight and MaxQueue bound each namespace (DefaultMaxInFlight,
	// DefaultMaxQueue); OwnerInFlight bounds each Owner (DefaultOwnerInFlight).
	MaxInFlight, MaxQueue, OwnerInFlight int
	// Timing is passed to each Lookup; the zero value means production.
	Timing protocol.Timing
	// Logger receives the gateway's logs; nil discards them.
	Logger *slog.Logger
	// MaxCopyAge is the /readyz policy while a namespace's copy of the
	// lease table is stale (lookup.CopyAge.Stale: the Manager has not
	// answered a poll in time): 0 keeps the gateway ready, routing from its
	// copy; more makes /readyz answer 503 once a stale copy is older than
	// that, so a balancer prefers a gateway still in touch.
	MaxCopyAge time.Duration
	// Webhooks are URLs to POST each loss notification to, at least once
	// while the gateway runs (webhook.go).
	Webhooks []string
	// NewRouter, if set, replaces the Lookup of each namespace (tests).
	// The router calls onLoss as lookup.Config's OnLoss.
	NewRouter func(ctx context.Context, namespace string, onLoss func(lookup.Loss)) (Router, error)
	// Transport, if set, replaces the transport to the Owners.
	Transport http.RoundTripper
	// Certs, if set, is the gateway's certificate (a lookup's, or an
	// operator's; docs/security.md): its Lookups dial the Manager with it,
	// and it sends requests to the Owners over HTTPS with it, accepting
	// only owner certificates that name the Owner's host; gRPC routes go
	// over HTTP/2 on mutual TLS (ALPN h2) the same way. Nil needs Insecure.
	Certs *certs.Source
	// Insecure, with Certs nil, dials the Manager and the Owners in
	// plaintext. Plaintext is only ever chosen explicitly: with neither
	// Certs nor Insecure, New fails.
	Insecure bool
}

// Router is what the gateway needs of a namespace's Lookup.
type Router interface {
	Lookup(keyspace.Key) (lookup.Route, bool)
	LSN() keyspace.LSN
	Age() lookup.CopyAge
	WaitSynced(context.Context) error
	Close() error
}

var _ Router = (*lookup.Lookup)(nil)

// StaleHeader, on an answer, says the gateway routed it from a stale copy
// of the lease table (the Manager has not answered a poll in time), and how
// old the copy is: "age=12.5s".
const StaleHeader = "Leasehold-Stale"

// Paths the gateway serves itself; no route may take them.
var reservedPaths = []string{"/healthz", "/readyz", "/metrics", "/v1/", GatewayService}

// Gateway is Ninja's connection manager for leasehold: an HTTP proxy that
// sends each request to the Owner of its key, retries refusals, admits or
// sheds load by priority, and relays loss notifications (docs/gateway.md).
type Gateway struct {
	cfg       Config
	routes    []*Route // longest prefix first
	spaces    map[string]*space
	owners    ownerSlots
	transport http.RoundTripper
	h2c       http.RoundTripper // for gRPC: HTTP/2 without TLS, prior knowledge
	scheme    string            // of the Owners' URLs: http, or https with Config.Certs
	losses    *lossLog
	grpc      *grpc.Server // the gateway's own gRPC service (lossgrpc.go)
	metrics   *metrics
	log       *slog.Logger

	hooksCancel context.CancelFunc
	hooks       sync.WaitGroup // the webhook deliveries

	draining atomic.Bool
	stop     chan struct{} // closed by Shutdown: ends the SSE streams
	stopOnce sync.Once
}

// space is one namespace: its Lookup and its admission control.
type space struct {
	name   string
	router Router
	adm    *admission
	synced atomic.Bool
}

// stale returns the copy's age and whether it is stale, once it has synced.
func (sp *space) stale() (time.Duration, bool) {
	a := sp.router.Age()
	return a.Age, a.Synced && a.Stale()
}

// New starts a Gateway: one Lookup per namespace its routes name. It
// returns at once; /readyz says when every copy has synced. It refuses a
// Config that Validate refuses, with the same error.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, spaces: map[string]*space{}, losses: newLossLog(1024), log: cfg.Logger, stop: make(chan struct{})}
	g.owners.max = int64(cfg.OwnerInFlight)
	for i := range cfg.Routes {
		g.routes = append(g.routes, &cfg.Routes[i])
	}
	// The longest prefix first; for one prefix, a route naming the host
	// before one for any host.
	slices.SortStableFunc(g.routes, func(a, b *Route) int {
		if d := len(b.Prefix) - len(a.Prefix); d != 0 {
			return d
		}
		return len(b.Host) - len(a.Host)
	})
	g.transport, g.h2c = cfg.ownerTransports()
	g.scheme = "http"
	if cfg.Certs != nil {
		g.scheme = "https"
	}
	g.metrics = newMetrics(g)
	g.grpc = newGRPCServer(g)
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	g.hooksCancel = hcancel
	hookClient := &http.Client{Transport: g.transport}
	for _, u := range cfg.Webhooks {
		// Every notification from the gateway's start on: where that is
		// is read here, not in the goroutine, which may start after the
		// first notifications.
		after := g.losses.last()
		g.hooks.Go(func() { g.deliver(hctx, u, hookClient, after) })
	}
	for _, r := range g.routes {
		if g.spaces[r.Namespace] != nil {
			continue
		}
		sp := &space{name: r.Namespace, adm: newAdmission(cfg.MaxInFlight, cfg.MaxQueue)}
		onLoss := func(l lookup.Loss) {
			g.losses.add(sp.name, l)
			g.metrics.losses.WithLabelValues(sp.name).Inc()
		}
		var err error
		if cfg.NewRouter != nil {
			sp.router, err = cfg.NewRouter(ctx, r.Namespace, onLoss)
		} else {
			sp.router, err = lookup.New(ctx, cfg.lookupConfig(r.Namespace, onLoss))
		}
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gateway: namespace %q: %w", r.Namespace, err)
		}
		g.spaces[r.Namespace] = sp
		g.metrics.addSpace(sp)
		go func() {
			if sp.router.WaitSynced(context.WithoutCancel(ctx)) == nil {
				sp.synced.Store(true)
			}
		}()
	}
	return g, nil
}

// Shutdown marks the gateway not ready (/readyz answers 503, so balancers
// stop sending) and ends the loss streams, so that http.Server.Shutdown
// only waits for the requests in flight.
func (g *Gateway) Shutdown() {
	g.draining.Store(true)
	g.stopOnce.Do(func() { close(g.stop) })
}

// Close stops the Lookups.
func (g *Gateway) Close() error {
	g.Shutdown()
	g.grpc.Stop()
	if g.hooksCancel != nil {
		g.hooksCancel()
		g.hooks.Wait()
	}
	var errs []error
	for _, sp := range g.spaces {
		if sp.router != nil {
			errs = append(errs, sp.router.Close())
		}
	}
	return errors.Join(errs...)
}

// ServeHTTP serves the gateway's own paths and proxies the rest.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.Path; {
	case p == "/healthz":
		io.WriteString(w, "ok\n")
		return
	case p == "/readyz":
		g.serveReady(w)
		return
	case p == "/metrics":
		g.metrics.handler.ServeHTTP(w, r)
		return
	case p == "/v1/losses":
		g.serveLosses(w, r)
		return
	case p == "/v1/covers":
		g.serveCovers(w, r)
		return
	case p == "/v1/key":
		g.serveKey(w, r)
		return
	case strings.HasPrefix(p, GatewayService):
		g.grpc.ServeHTTP(w, r)
		return
	}
	rt := g.match(r)
	if rt == nil {
		g.metrics.requests.WithLabelValues("", "404").Inc()
		http.Error(w, fmt.Sprintf("no route for host %q path %q", r.Host, r.URL.Path), http.StatusNotFound)
		return
	}
	start := time.Now()
	code := g.forward(w, r, rt)
	took := time.Since(start)
	g.metrics.requests.WithLabelValues(rt.Name, strconv.Itoa(code)).Inc()
	g.metrics.latency.WithLabelValues(rt.Name).Observe(took.Seconds())
	level := slog.LevelDebug
	if code >= 500 {
		level = slog.LevelWarn
	}
	if g.log.Enabled(r.Context(), level) {
		g.log.Log(r.Context(), level, "request", "route", rt.Name, "method", r.Method, "path", r.URL.Path,
			"code", code, "owner", w.Header().Get("Leasehold-Owner"), "retries", w.Header().Get("Leasehold-Retries"), "took", took)
	}
}

func (g *Gateway) serveReady(w http.ResponseWriter) {
	if g.draining.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	for _, sp := range g.spaces {
		if !sp.synced.Load() {
			http.Error(w, fmt.Sprintf("namespace %q: no copy of the lease table yet", sp.name), http.StatusServiceUnavailable)
			return
		}
		if age, stale := sp.stale(); stale && g.cfg.MaxCopyAge > 0 && age > g.cfg.MaxCopyAge {
			http.Error(w, fmt.Sprintf("namespace %q: the copy of the lease table is %s old, stale (the Manager has not answered), over --max-copy-age %s",
				sp.name, age.Round(time.Millisecond), g.cfg.MaxCopyAge), http.StatusServiceUnavailable)
			return
		}
	}
	io.WriteString(w, "ready\n")
}

// match returns the route for a request: the longest prefix whose host
// matches, a route naming the host before one for any host, or nil.
func (g *Gateway) match(r *http.Request) *Route {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	for _, rt := range g.routes {
		if (rt.Host == "" || strings.EqualFold(rt.Host, host)) && strings.HasPrefix(r.URL.Path, rt.Prefix) {
			return rt
		}
	}
	return nil
}

// fail answers an error the gateway decided, and returns its status.
func fail(w http.ResponseWriter, code int, format string, args ...any) int {
	http.Error(w, fmt.Sprintf(format, args...), code)
	return code
}

// Retry backoff: from first to at most max, doubling.
const (
	backoffFirst = 5 * time.Millisecond
	backoffMax   = 250 * time.Millisecond
)

// forward sends a request to its key's Owner, retrying refusals within its
// deadline, and returns the status answered.
func (g *Gateway) forward(w http.ResponseWriter, req *http.Request, rt *Route) int {
	key, err := rt.keyOf(req)
	if errors.Is(err, errNoKey) {
		return fail(w, http.StatusBadRequest, "no key: route %q takes the key from the %s", rt.Name, rt.keyDesc())
	} else if err != nil {
		return fail(w, http.StatusBadRequest, "bad key: %v", err)
	}
	if len(key) > g.cfg.MaxKeyBytes {
		return fail(w, http.StatusBadRequest, "key of %d bytes: the limit is %d", len(key), g.cfg.MaxKeyBytes)
	}
	class := rt.class
	if h := req.Header.Get(PriorityHeader); h != "" {
		c := classOf(h)
		if c < 0 {
			return fail(w, http.StatusBadRequest, "%s %q: want one of %s", PriorityHeader, h, strings.Join(Classes, ", "))
		}
		class = min(class, c) // a client may lower its priority, not raise it
	}
	var body []byte
	var stream *replayBody // a gRPC call's messages, streamed
	grpcCall := isGRPC(req)
	if grpcCall && req.Body != nil && req.Body != http.NoBody {
		// A client or bidirectional stream's messages keep coming while the
		// answer does: stream them, keeping the start to send again after
		// a refusal.
		stream = newReplayBody(req.Body, g.cfg.MaxBodyBytes)
		defer stream.close()
	} else if req.Body != nil && req.Body != http.NoBody {
		if req.ContentLength > g.cfg.MaxBodyBytes {
			return fail(w, http.StatusRequestEntityTooLarge, "body of %d bytes: the limit is %d", req.ContentLength, g.cfg.MaxBodyBytes)
		}
		body, err = io.ReadAll(http.MaxBytesReader(w, req.Body, g.cfg.MaxBodyBytes))
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return fail(w, http.StatusRequestEntityTooLarge, "body over the limit of %d bytes", g.cfg.MaxBodyBytes)
			}
			return fail(w, http.StatusBadRequest, "reading the body: %v", err)
		}
	}
	timeout := time.Duration(rt.Timeout)
	ctx, cancel := context.WithTimeout(req.Context(), timeout)
	defer cancel()

	sp := g.spaces[rt.Namespace]
	if err := sp.adm.acquire(ctx, class); err != nil {
		g.metrics.shed.WithLabelValues(sp.name, Classes[class]).Inc()
		w.Header().Set("Retry-After", "1")
		if errors.Is(err, errShed) {
			return fail(w, http.StatusTooManyRequests, "namespace %q is overloaded: a %s-priority request is shed", sp.name, Classes[class])
		}
		return fail(w, http.StatusServiceUnavailable, "namespace %q is overloaded: no slot within the deadline of %s", sp.name, timeout)
	}
	defer sp.adm.release()

	k := keyspace.KeyOf(key)
	backoff := backoffFirst
	var last string // why the last attempt failed
	idempotent := isIdempotent(req)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			backoff = min(2*backoff, backoffMax)
		}
		if ctx.Err() != nil {
			break
		}
		route, ok := sp.router.Lookup(k)
		if !ok {
			last = "no Owner holds the key"
			g.metrics.retries.WithLabelValues(rt.Name, "no-owner").Inc()
			continue
		}
		if !g.owners.tryAcquire(route.Owner) {
			last = fmt.Sprintf("Owner %s has %d requests in flight, its limit", route.Owner, g.owners.max)
			g.metrics.retries.WithLabelValues(rt.Name, "owner-busy").Inc()
			continue
		}
		var sbody io.ReadCloser
		if stream != nil {
			var ok bool
			if sbody, ok = stream.attempt(); !ok {
				g.owners.release(route.Owner)
				return fail(w, http.StatusBadGateway, "%s; the call's first %d bytes are no longer held to send it again", last, g.cfg.MaxBodyBytes)
			}
		}
		sent := time.Now()
		resp, err := g.send(ctx, req, body, sbody, route.Addr)
		outcome := "failed"
		var why owner.Refusal
		var refused bool
		if err == nil {
			outcome = "answered"
			if why, refused = refusalOf(resp); refused {
				outcome = "refused"
			}
		}
		g.metrics.attempts.WithLabelValues(route.Owner, outcome).Observe(time.Since(sent).Seconds())
		if err != nil {
			g.owners.release(route.Owner)
			if ctx.Err() != nil {
				last = fmt.Sprintf("Owner %s at %s did not answer", route.Owner, route.Addr)
				break
			}
			if !idempotent && !isDialError(err) {
				g.log.Warn("owner failed", "owner", route.Owner, "addr", route.Addr, "err", err)
				return fail(w, http.StatusBadGateway, "Owner %s at %s: %v (not retried: %s is not idempotent)", route.Owner, route.Addr, err, req.Method)
			}
			last = fmt.Sprintf("Owner %s at %s: %v", route.Owner, route.Addr, err)
			g.metrics.retries.WithLabelValues(rt.Name, "unreachable").Inc()
			continue
		}
		if refused {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			g.owners.release(route.Owner)
			last = fmt.Sprintf("Owner %s refused: %s", route.Owner, why)
			g.metrics.retries.WithLabelValues(rt.Name, "refused-"+string(why)).Inc()
			continue
		}
		if stream != nil {
			stream.commit() // this Owner's answer is relayed: the call will not be sent again
		}
		markStale(w, sp)
		code := g.relay(w, resp, route.Owner, attempt)
		g.owners.release(route.Owner)
		return code
	}
	if req.Context().Err() != nil {
		return 499 // the client went away; nobody reads an answer
	}
	markStale(w, sp)
	return fail(w, http.StatusGatewayTimeout, "no answer within the deadline of %s: %s", timeout, last)
}

// markStale sets StaleHeader on an answer routed from a stale copy.
func markStale(w http.ResponseWriter, sp *space) {
	if age, stale := sp.stale(); stale {
		w.Header().Set(StaleHeader, "age="+age.Round(time.Millisecond).String())
	}
}

// send makes one attempt at the Owner at addr, with body, or sbody if set
// (a stream's, read as it comes).
func (g *Gateway) send(ctx context.Context, req *http.Request, body []byte, sbody io.ReadCloser, addr string) (*http.Response, error) {
	u := &url.URL{Scheme: g.scheme, Host: addr, Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	out, err := http.NewRequestWithContext(ctx, req.Method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if body != nil {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	if sbody != nil {
		out.Body, out.ContentLength = sbody, -1
	}
	out.Header = req.Header.Clone()
	removeHopByHop(out.Header)
	transport := g.transport
	if isGRPC(req) {
		// gRPC needs HTTP/2 and trailers: say so, as a client would.
		out.Header.Set("Te", "trailers")
		transport = g.h2c
	}
	if ip, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		if prior := req.Header.Get("X-Forwarded-For"); prior != "" {
			ip = prior + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}
	out.Header.Set("X-Forwarded-Host", req.Host)
	return transport.RoundTrip(out)
}

// relay copies an Owner's answer to the client.
func (g *Gateway) relay(w http.ResponseWriter, resp *http.Response, ownerID string, retries int) int {
	defer resp.Body.Close()
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	removeHopByHop(h)
	h.Set("Leasehold-Owner", ownerID)
	h.Set("Leasehold-Retries", strconv.Itoa(retries))
	w.WriteHeader(resp.StatusCode)
	defer func() {
		for k, vs := range resp.Trailer { // known once the body is read
			h[http.TrailerPrefix+k] = vs
		}
	}()
	if resp.ContentLength >= 0 {
		io.Copy(w, resp.Body)
		return resp.StatusCode
	}
	// A stream: pass each piece on as it comes.
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				break
			}
			_ = rc.Flush()
		}
		if err != nil {
			break
		}
	}
	return resp.StatusCode
}

var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}

// refusalOf reports whether an Owner's answer is a refusal under the
// contract. A gRPC refusal's status comes in trailers after an empty body
// (grpc-go sends header metadata in a frame of its own), so for a gRPC
// answer that carries the refusal header the body is read, up to a bound,
// to see them; anything read is put back for the relay.
func refusalOf(resp *http.Response) (owner.Refusal, bool) {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/grpc") || resp.Header.Get(owner.RefusedHeader) == "" || resp.Header.Get("Grpc-Status") != "" {
		return owner.RefusalOf(resp.StatusCode, resp.Header)
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil || len(buf) > 0 {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), resp.Body), resp.Body}
		return "", false
	}
	h := resp.Header.Clone()
	for k, vs := range resp.Trailer {
		h[k] = vs
	}
	return owner.RefusalOf(resp.StatusCode, h)
}

// isGRPC reports whether a request is a gRPC call.
func isGRPC(r *http.Request) bool {
	return r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// isIdempotent reports whether a request may be sent twice: its method
// says so, or it carries an Idempotency-Key.
func isIdempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions, http.MethodTrace:
		return true
	}
	return r.Header.Get("Idempotency-Key") != ""
}

// isDialError reports whether err happened before the request was sent.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// urlUnescape unescapes a path segment.
func urlUnescape(s string) (string, error) { return url.PathUnescape(s) }
