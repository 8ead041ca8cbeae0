package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/cmd/internal/dashboard"
	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func init() { register(newDashboardCommand) }

// DefaultDashboard is where leasehold dashboard listens unless told
// otherwise: loopback only, as it serves an action that drains Owners.
const DefaultDashboard = "127.0.0.1:7480"

type dashboardOptions struct {
	clientOptions
	listen        string
	allNamespaces bool // --namespace not given: follow every namespace
	refresh       time.Duration
	readOnly      bool
	plainListener bool // the demo's: plain HTTP on loopback, though it dials with certificates
	logOptions
}

func newDashboardCommand(e *env) *cobra.Command {
	o := &dashboardOptions{}
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a live web dashboard of the key space, the Owners, their load and every loss",
		Long: `Serve a web page, at https://--listen/, that shows a Manager live: the key space
as a ring coloured by Owner (hover for a range, its LGN, holder and load), the
Owners with their ranges, share, load, capacity and draining state (and,
with standby Owners, each one's zone and the ranges it stands by for, in
sync or filling), the hot
keys, the Manager's replicas with their role, term and log position, and a
timeline of the lease table's changes, planned moves and loss notifications,
filterable by namespace and Owner. An operator may drain an Owner from the
page (unless --read-only); the maintenance gate's answer is shown.

The dashboard is a client of the Manager, not part of it: it follows each
namespace with one Lookup (pushed every change, raising loss notifications)
and asks for the Manager's status once per --refresh, and every viewer is
sent the same views over one shared stream. The Manager's cost is the same
for one viewer or a hundred. See docs/operations.md, "The dashboard".

It follows the namespaces the Manager has when it starts (or --namespace);
restart it to follow one created later. It listens on 127.0.0.1 unless
--listen says otherwise.

With certificates it serves HTTPS with its own certificate (the operator's,
else the lookup's, in --certs-dir; give it the dashboard's HOST when you
create it), only to viewers that present a certificate of the group's CA
(load yours into the browser). Only a viewer whose certificate is an
operator's may drain, and the dashboard then drains with its own operator
certificate; any other viewer gets 403. With --insecure it serves plain
HTTP to anyone who reaches it: keep it on a loopback address.`,
		Example: `  leasehold dashboard
  leasehold dashboard --manager 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403 --listen 127.0.0.1:8080
  leasehold dashboard --namespace presence --read-only`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, _ []string) error { return o.run(ctx, e) }),
	}
	o.addFlags(cmd, e, "follow namespace `NS` only (default: every namespace)")
	cmd.Flags().Lookup("namespace").DefValue = "" // every namespace, as the usage says; not "default"
	_ = cmd.Flags().MarkHidden("json")
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", DefaultDashboard, "serve the page on `ADDR`, host:port (port 0 picks one)")
	f.DurationVar(&o.refresh, "refresh", time.Second, "ask the Manager for its status (load, replicas) this often")
	f.BoolVar(&o.readOnly, "read-only", false, "offer no drain action")
	o.addLogFlags(f, "warn")
	cmd.PreRun = func(cmd *cobra.Command, _ []string) {
		o.allNamespaces = !cmd.Flags().Changed("namespace")
	}
	return cmd
}

func (o *dashboardOptions) run(ctx context.Context, e *env) error {
	if err := o.validate(); err != nil {
		return err
	}
	d, err := o.start(ctx, o.logger(e.stderr))
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "leasehold dashboard on %s (manager %s, namespaces %s)\n", d.url, o.manager, strings.Join(d.names, ", "))
	return d.wait()
}

// runningDashboard is a dashboard serving until its context ends.
type runningDashboard struct {
	url   string   // http://host:port/
	names []string // the namespaces it follows
	wait  func() error
}

// start starts a dashboard of the Manager at o.manager, serving on
// o.listen until ctx ends; wait waits for that and stops it.
func (o *dashboardOptions) start(ctx context.Context, log *slog.Logger) (*runningDashboard, error) {
	if o.refresh < 100*time.Millisecond {
		return nil, usagef("--refresh %s: want at least 100ms", o.refresh)
	}
	if _, port, err := net.SplitHostPort(o.listen); err != nil {
		return nil, usagef("--listen %q: want host:port: %v", o.listen, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return nil, usagef("--listen %q: port %q is not a number from 0 to 65535", o.listen, port)
	}
	// Fail fast when no Manager answers; learn the namespaces.
	ask := o.namespace
	if o.allNamespaces {
		ask = ""
	}
	answers, err := o.askAll(ctx, ask)
	if err != nil {
		return nil, err
	}
	resp := leaderAnswer(answers)
	if resp == nil {
		return nil, answers[0].err
	}
	src := &managerSource{o: &o.clientOptions, lookups: map[string]*lookup.Lookup{}}
	for _, n := range resp.GetNamespaces() {
		src.names = append(src.names, n.GetName())
	}
	if len(src.names) == 0 {
		return nil, fmt.Errorf("manager at %s: no namespace to show", o.manager)
	}
	hub, err := dashboard.NewHub(dashboard.Config{Source: src, Refresh: o.refresh, ReadOnly: o.readOnly, Logger: log})
	if err != nil {
		return nil, err
	}
	opts, err := o.dialOptions()
	if err != nil {
		return nil, err
	}
	for _, ns := range src.names {
		l, err := lookup.New(ctx, lookup.Config{
			Connection: leasehold.Connection{
				Manager:     o.manager,
				Namespace:   ns,
				Logger:      log,
				DialOptions: opts,
			},
			OnUpdate: func(u lookup.Update) { hub.Changed(ns, u) },
			OnLoss:   func(l lookup.Loss) { hub.Lost(ns, l) },
		})
		if err != nil {
			src.close()
			return nil, err
		}
		src.mu.Lock()
		src.lookups[ns] = l
		src.mu.Unlock()
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		src.close()
		return nil, fmt.Errorf("dashboard: cannot listen on %s: %w", o.listen, err)
	}
	handler, scheme := hub.Handler(o.manager), "http"
	if o.insecure || o.plainListener {
		if !client.Loopback(lis.Addr().String()) {
			log.Error("THE DASHBOARD LISTENS ON A NETWORK ADDRESS WITHOUT AUTHENTICATION: anyone who reaches it sees the table and may drain Owners with this process's certificate (docs/security.md)",
				"addr", lis.Addr().String())
		}
	} else {
		// HTTPS with the dashboard's own certificate, to viewers with a
		// certificate of the group's CA; only an operator's may drain. A
		// viewer without one is refused per request, not at the handshake:
		// a person in a browser gets a page that says what is missing.
		handler = viewerCerts(o.src, operatorDrains(o.src.Identity(), handler)) // dashboard_auth.go
		lis, scheme = tls.NewListener(lis, o.src.ServerTLSOpen()), "https"
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(lis) }()
	hctx, hcancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = hub.Run(hctx) }()
	wait := func() error {
		defer src.close()
		var err error
		select {
		case <-ctx.Done():
		case err = <-served:
			err = fmt.Errorf("dashboard: %w", err)
		}
		hcancel()
		<-ran
		stop, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hs.Shutdown(stop)
		_ = hs.Close() // the event streams do not end by themselves
		return err
	}
	return &runningDashboard{url: scheme + "://" + lis.Addr().String() + "/", names: src.names, wait: wait}, nil
}

// operatorDrains lets only a viewer with an operator's certificate drain:
// the dashboard drains with its own certificate (self), so it must not
// lend that role to a viewer who lacks it.
func operatorDrains(self certs.Identity, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/drain" {
			if id, ok := certs.FromHTTP(r); !ok || id.Role != certs.Operator {
				http.Error(w, fmt.Sprintf("dashboard: %s may not drain: draining needs the operator role", id), http.StatusForbidden)
				return
			}
			if self.Role != certs.Operator {
				http.Error(w, fmt.Sprintf("dashboard: this dashboard's certificate (%s) is not an operator's, so it cannot drain", self), http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// managerSource is the dashboard's Source: a Lookup per namespace for the
// tables, and the status and drain calls of 'leasehold status' and
// 'leasehold drain'.
type managerSource struct {
	o     *clientOptions
	names []string

	mu      sync.Mutex
	lookups map[string]*lookup.Lookup // guarded by mu
}

var _ dashboard.Source = (*managerSource)(nil)

func (s *managerSource) Namespaces() []string { return slices.Clone(s.names) }

func (s *managerSource) Segments(ns string) ([]leasetable.Segment, keyspace.LSN) {
	s.mu.Lock()
	l := s.lookups[ns]
	s.mu.Unlock()
	if l == nil {
		return nil, 0
	}
	return l.Segments(), l.LSN()
}

func (s *managerSource) Status(ctx context.Context) (dashboard.Status, error) {
	answers, err := s.o.askAll(ctx, "")
	if err != nil {
		return dashboard.Status{}, err
	}
	resp := leaderAnswer(answers)
	if resp == nil {
		return dashboard.Status{}, answers[0].err
	}
	st := statusOf(resp, clusterOf(answers))
	for _, r := range readiness(answers) { // as leasehold status judges it
		for i := range st.Managers {
			if st.Managers[i].Addr == r.Addr {
				st.Managers[i].Ready, st.Managers[i].Reason = r.Ready, r.Reason
			}
		}
	}
	return st, nil
}

// statusOf converts the Manager's answer for the dashboard.
func statusOf(resp *pb.StatusResponse, c clusterJSON) dashboard.Status {
	st := dashboard.Status{Epoch: resp.GetEpoch(), Leader: c.Leader}
	for _, m := range c.Managers {
		st.Managers = append(st.Managers, dashboard.Manager{ID: m.ID, Addr: m.Addr, Role: m.Role, Term: m.Term,
			Commit: m.Commit, Applied: m.Applied, Lookups: m.Lookups, Error: m.Error})
	}
	for _, n := range resp.GetNamespaces() {
		ns := dashboard.NamespaceStatus{Name: n.GetName(), LSN: n.GetLsn(), Ranges: n.GetSegments(),
			FreeRanges: n.GetFreeSegments(), Lookups: n.GetLookups(), Standbys: n.GetStandbys()}
		for _, ow := range n.GetOwners() {
			o := dashboard.Owner{ID: ow.GetId(), Addr: ow.GetAddr(), Incarnation: ow.GetIncarnation(), Member: ow.GetMember(),
				Ranges: ow.GetRanges(), Share: ow.GetShare(), Load: ow.GetLoad(), Capacity: capacity(ow), Draining: ow.GetDraining(),
				Zone: ow.GetZone(), StandbyRanges: ow.GetStandbyRanges(), StandbyInSync: ow.GetStandbyInSync()}
			for _, k := range ow.GetHotKeys() {
				o.HotKeys = append(o.HotKeys, dashboard.HotKey{Key: keyspace.Key(k.GetKey()), Rate: k.GetRate()})
			}
			ns.Owners = append(ns.Owners, o)
		}
		st.Namespaces = append(st.Namespaces, ns)
	}
	return st
}

func (s *managerSource) Drain(ctx context.Context, ns, owner string) (string, error) {
	o := *s.o
	o.namespace = ns
	addr, err := o.atLeader(func(addr string) (string, error) { return o.drainAt(ctx, addr, owner) },
		func(err error) bool { return !unreachableError(err) })
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("draining %s in namespace %s: its ranges move to the other owners (manager %s)", owner, ns, addr), nil
}

func (s *managerSource) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lookups {
		_ = l.Close()
	}
}

// StartDashboard serves the dashboard of the Manager at manager (a
// leasehold-demo's, on loopback) on listen, in plain HTTP, following every
// namespace and dialling with the certificates in certsDir, or in plaintext
// when it is "". It serves until ctx ends; wait waits for that and stops
// it. It is leasehold-demo's --dashboard.
func StartDashboard(ctx context.Context, manager, certsDir, listen string) (url string, wait func() error, err error) {
	o := &dashboardOptions{clientOptions: clientOptions{manager: manager, timeout: 5 * time.Second,
		trustOptions: trustOptions{certsDir: certsDir, insecure: certsDir == ""}},
		listen: listen, allNamespaces: true, refresh: time.Second, plainListener: true}
	r, err := o.start(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		return "", nil, err
	}
	return r.url, r.wait, nil
}
