package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/gateway"
	"github.com/leasehold/leasehold/internal/client"
)

func init() { register(newGatewayCommand) }

// DefaultGateway is where leasehold gateway listens unless told otherwise.
const DefaultGateway = "127.0.0.1:7490"

type gatewayOptions struct {
	trustOptions
	manager       string
	listen        string
	config        string
	routes        []string
	maxKeyBytes   int
	maxBodyBytes  int64
	maxInFlight   int
	maxQueue      int
	ownerInFlight int
	drainTimeout  time.Duration
	maxCopyAge    time.Duration
	logLevel      string
	webhooks      []string
	serveTLS      bool // HTTPS for the frontends, with the gateway's certificate
	clientCerts   bool // and only to frontends with a certificate of the group's CA
}

func newGatewayCommand(e *env) *cobra.Command {
	o := &gatewayOptions{}
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Proxy HTTP and gRPC requests to the Owner of their key, for clients in any language",
		Long: `Serve an HTTP/1.1 and HTTP/2 (cleartext) proxy, gRPC included (unary and
streaming calls, key from metadata), that sends each request to the
Owner of its key: a route maps a host and path prefix to a namespace and says
where the key is (a path segment, a header or a query parameter); the key is
hashed with xxhash64 as the libraries do and the request goes to the Owner the
gateway's Lookup names. An Owner's refusal (421, or 503 with Leasehold-Refused)
is retried with backoff within the route's deadline. Each namespace admits a
bounded number of requests in flight and in queue; under overload the lower
priority classes are shed first, with 429 and Retry-After.

The gateway also serves /healthz, /readyz, /metrics (Prometheus), and the
loss notifications as Server-Sent Events at /v1/losses (?key=K keeps those
covering key K). On SIGINT or SIGTERM it stops being ready, finishes the
requests in flight (for at most --drain-timeout) and exits. See docs/gateway.md.

With --certs-dir it follows the Manager and reaches the Owners (HTTP and
gRPC) over mutual TLS with its lookup (or operator) certificate. --tls
serves the frontends HTTPS too (HTTP/2 with ALPN) with that certificate;
--client-certs then serves only frontends presenting a certificate of the
group's CA (see docs/security.md).

A route is given with --route as comma-separated fields, or in a JSON
--config file {"routes": [{...}]} with the same fields:
  name=NAME  host=HOST  prefix=/PATH/  namespace=NS  key=path:N|header:NAME|query:NAME
  priority=low|normal|high  timeout=10s`,
		Example: `  leasehold gateway --route 'name=kv,prefix=/kv/,key=path:1'
  leasehold gateway --listen :8080 --config routes.json
  curl -X PUT --data v1 http://127.0.0.1:7490/kv/alice; curl http://127.0.0.1:7490/kv/alice
  curl -N http://127.0.0.1:7490/v1/losses`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, _ []string) error { return o.run(ctx, e) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.manager, "manager", e.defaultManager(), managerUsage)
	f.StringVar(&o.listen, "listen", DefaultGateway, "serve on `ADDR`, host:port (port 0 picks one)")
	f.StringVar(&o.config, "config", "", "read routes from the JSON `FILE`")
	f.StringArrayVar(&o.routes, "route", nil, "serve a `ROUTE` (repeatable): name=…,prefix=…,namespace=…,key=…,priority=…,timeout=…")
	f.IntVar(&o.maxKeyBytes, "max-key-bytes", gateway.DefaultMaxKeyBytes, "answer 400 to a key longer than this")
	f.Int64Var(&o.maxBodyBytes, "max-body-bytes", gateway.DefaultMaxBodyBytes, "answer 413 to a body larger than this (bodies are held to be sent again)")
	f.IntVar(&o.maxInFlight, "max-in-flight", gateway.DefaultMaxInFlight, "requests in flight per namespace")
	f.IntVar(&o.maxQueue, "max-queue", gateway.DefaultMaxQueue, "requests waiting for a slot per namespace; beyond, the lowest class is shed")
	f.IntVar(&o.ownerInFlight, "owner-in-flight", gateway.DefaultOwnerInFlight, "requests in flight per Owner")
	f.DurationVar(&o.maxCopyAge, "max-copy-age", 0, "answer 503 at /readyz once the copy of the lease table is stale (the Manager does not answer) and older than this (0: stay ready, routing from the copy)")
	f.Var(newChoice(&o.logLevel, "warn", "debug", "info", "warn", "error"), "log-level", "the least severe log level written to stderr (debug: one line per request)")
	f.StringArrayVar(&o.webhooks, "loss-webhook", nil, "POST each loss notification to `URL` (repeatable), retried until it answers 2xx")
	f.DurationVar(&o.drainTimeout, "drain-timeout", 30*time.Second, "on SIGINT or SIGTERM, how long to finish the requests in flight")
	f.BoolVar(&o.serveTLS, "tls", false, "serve the frontends HTTPS (HTTP/2 with ALPN, gRPC included) with the gateway's certificate from --certs-dir")
	f.BoolVar(&o.clientCerts, "client-certs", false, "with --tls, serve only frontends presenting a certificate of the group's CA (/healthz and /readyz answer anyone)")
	o.addTrustFlags(f, e)
	return cmd
}

func (o *gatewayOptions) run(ctx context.Context, e *env) error {
	if _, err := client.SplitManagers(o.manager); err != nil {
		return usagef("--manager: %v", err)
	}
	if o.maxCopyAge < 0 {
		return usagef("--max-copy-age %s must not be negative", o.maxCopyAge)
	}
	if o.drainTimeout <= 0 {
		return usagef("--drain-timeout %s must be positive", o.drainTimeout)
	}
	var routes []gateway.Route
	if o.config != "" {
		rs, err := gateway.LoadRoutes(o.config)
		if err != nil {
			return usagef("--config: %v", err)
		}
		routes = append(routes, rs...)
	}
	for _, s := range o.routes {
		r, err := gateway.ParseRoute(s)
		if err != nil {
			return usagef("--route: %v", err)
		}
		routes = append(routes, r)
	}
	if len(routes) == 0 {
		return usagef("no route: give --route or --config")
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(o.logLevel)) // one of the choices
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	if o.clientCerts && !o.serveTLS {
		return usagef("--client-certs needs --tls")
	}
	var src *certs.Source
	if o.resolve(); o.serveTLS && o.insecure {
		return usagef("--tls needs certificates (--certs-dir), not --insecure")
	}
	if !o.insecure {
		var err error
		if src, err = o.open(certs.Lookup, certs.Operator); err != nil {
			return err
		}
	}
	g, err := gateway.New(ctx, gateway.Config{
		Certs: src, Insecure: o.insecure,
		Manager: o.manager, Routes: routes, MaxKeyBytes: o.maxKeyBytes, MaxBodyBytes: o.maxBodyBytes,
		MaxInFlight: o.maxInFlight, MaxQueue: o.maxQueue, OwnerInFlight: o.ownerInFlight, MaxCopyAge: o.maxCopyAge, Webhooks: o.webhooks, Logger: log,
	})
	if err != nil {
		return usageError(err)
	}
	defer g.Close()
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", o.listen, err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	var handler http.Handler = g
	if o.serveTLS {
		lis, handler = frontendTLS(lis, src, o.clientCerts, g)
		protocols.SetHTTP2(true)
	}
	srv := &http.Server{Handler: handler, Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	fmt.Fprintf(e.stdout, "leasehold gateway listening on %s (manager %s, %d routes)\n", lis.Addr(), o.manager, len(routes))
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Stop being ready, end the loss streams, finish the requests in flight.
	g.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), o.drainTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		srv.Close()
		return fmt.Errorf("requests still in flight after --drain-timeout %s were cut", o.drainTimeout)
	}
	fmt.Fprintf(e.stdout, "leasehold gateway stopped\n")
	return err
}

// frontendTLS serves the frontends HTTPS on lis with src's certificate,
// HTTP/2 (and so gRPC) negotiated with ALPN. With clientCerts only a
// frontend presenting a certificate of the group's CA is served (401 says
// what is wrong with the others'; gRPC maps it to Unauthenticated), except
// for /healthz and /readyz, which a load balancer's probe asks without one:
// so the listener does not refuse a client at the handshake
// (certs.ServerTLSOpen), each request is checked.
func frontendTLS(lis net.Listener, src *certs.Source, clientCerts bool, h http.Handler) (net.Listener, http.Handler) {
	cfg := src.ServerTLSOpen()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	if !clientCerts {
		cfg.ClientAuth = tls.NoClientCert
		return tls.NewListener(lis, cfg), h
	}
	required := certs.RequireHTTP(src, nil, h)
	return tls.NewListener(lis, cfg), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		required.ServeHTTP(w, r)
	})
}
