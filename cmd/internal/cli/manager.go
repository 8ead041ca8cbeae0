package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/version"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
	"github.com/leasehold/leasehold/rebalance"
)

func init() { register(newManagerCommand) }

// profiles are the named timing profiles of --timings.
var profiles = map[string]func() protocol.Timing{
	"production": protocol.Production,
	"fast":       protocol.Fast,
}

// timingFlags are the flags that override one field of the chosen profile.
// field is the protocol.Timing field as a protocol.TimingError names it;
// dur points at it, or is nil for MaxDrift, the one that is not a duration.
var timingFlags = []struct {
	flag, field, usage string
	dur                func(*protocol.Timing) *time.Duration
}{
	{"owner-lease", "OwnerLease", "how long an Owner believes a lease after sending the request it answers",
		func(t *protocol.Timing) *time.Duration { return &t.OwnerLease }},
	{"renew", "Renew", "how often an Owner renews its leases (at most half of --owner-lease)",
		func(t *protocol.Timing) *time.Duration { return &t.Renew }},
	{"manager-lease", "ManagerLease", "how long the Manager reserves a range after answering (at least --owner-lease × (1 + --max-drift))",
		func(t *protocol.Timing) *time.Duration { return &t.ManagerLease }},
	{"sync", "Sync", "how often a Lookup polls for changes (changes are pushed; this is the safety net)",
		func(t *protocol.Timing) *time.Duration { return &t.Sync }},
	{"sync-timeout", "SyncTimeout", "how stale a Lookup's copy may grow before it reports every range lost (at least 2 × --sync)",
		func(t *protocol.Timing) *time.Duration { return &t.SyncTimeout }},
	{"log-retention", "LogRetention", "how long the change log keeps a change (at least --sync-timeout)",
		func(t *protocol.Timing) *time.Duration { return &t.LogRetention }},
	{"max-drift", "MaxDrift", "bound on clock-rate differences, e.g. 0.05", nil},
}

// profileTable shows what each timing flag is in each profile, for --help.
func profileTable() string {
	var b strings.Builder
	prod, fast := protocol.Production(), protocol.Fast()
	fmt.Fprintf(&b, "  %-16s %-12s %s\n", "flag", "production", "fast")
	for _, tf := range timingFlags {
		p, f := fmt.Sprint(prod.MaxDrift), fmt.Sprint(fast.MaxDrift)
		if tf.dur != nil {
			p, f = tf.dur(&prod).String(), tf.dur(&fast).String()
		}
		fmt.Fprintf(&b, "  %-16s %-12s %s\n", "--"+tf.flag, p, f)
	}
	return b.String()
}

// managerOptions are the manager subcommand's flags.
type managerOptions struct {
	listen           string
	timings          string // a key of profiles
	namespaces       []string
	standbys         []string // --standbys: NS=N or N (the default namespace)
	metricsListen    string
	pprof            bool
	gcPercent        int    // --gc-percent
	memoryLimit      string // --memory-limit, as given
	memoryLimitBytes int64  // --memory-limit, parsed by checkGC
	logOptions
	id            uint64
	peers         string // ID=ADDR,…
	dataDir       string
	join          bool
	role          string // --role: voter or read-replica
	advertise     string
	drainGate     int           // --drain-gate
	handover      time.Duration // --handover
	rebalance     string        // --rebalance: off, weighted or centrifuge
	rebalanceEach time.Duration // --rebalance-every
	trustOptions
	podOptions

	// The flags of the other settings, straight into the configuration.
	settings manager.Config

	overrides protocol.Timing // the override flags' values; used only where set
	flags     *pflag.FlagSet  // to tell which overrides were set
}

func newManagerCommand(e *env) *cobra.Command { return (&managerOptions{}).command(e) }

// command builds the subcommand with its flags bound to o.
func (o *managerOptions) command(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run a Manager: lease ranges of the key space to Owners and keep Lookups in sync",
		Long: `Run a Manager. It serves the default namespace (and any added with --namespace),
grants leases on ranges of the key space to the Owners that connect, and keeps
every Lookup's copy of the lease table in sync.

The timers come from a profile (--timings production: 60 s owner leases, or
fast: 2 s, for tests and demos); the timing flags override single fields of
it, and the result must be safe (docs/protocol.md, "Timers"), or the Manager
refuses to start (exit code 2).

` + profileTable() + `
Planned moves hand a range's state from its old Owner to the new one
(C§2.1.2): the old Owner gets --handover to do it (default: one owner lease)
before the range is recalled without it; a negative --handover turns planned
moves off. At most --drain-gate Owners of a namespace may drain at once (on
a graceful stop, or leasehold drain); the others wait.

The Manager is a Raft group of one or more replicas (docs/operations.md).
Alone, it is a group of one: with --data-dir it keeps its state there, and a
restart within an owner lease costs the Owners nothing; without, a restart
starts over (a new epoch) and every Owner loses its leases. A group of three
(or five) survives the loss of one (or two): start each replica with its own
--id, --listen and --data-dir and the same --peers list. Only the leader
serves Owners; any replica serves Lookups.

When it listens it prints one line to stdout:
  leasehold manager listening on ADDR (timings PROFILE, replica ID)
Logs go to stderr. SIGINT or SIGTERM stops it cleanly (exit code 0).`,
		Example: `  leasehold manager --data-dir /var/lib/leasehold
  leasehold manager --timings fast --listen 127.0.0.1:17400 --metrics-listen 127.0.0.1:9400
  leasehold manager --namespace presence --namespace queues
  leasehold manager --id 1 --listen 127.0.0.1:7401 --data-dir d1 \
      --peers 1=127.0.0.1:7401,2=127.0.0.1:7402,3=127.0.0.1:7403`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, _ []string) error { return o.run(ctx, e) }),
	}
	f := cmd.Flags()
	o.flags = f
	f.StringVar(&o.listen, "listen", DefaultManager, "serve gRPC on `ADDR`, host:port")
	f.Var(newChoice(&o.timings, "production", "production", "fast"), "timings", "the timing profile the timing flags start from")
	for _, tf := range timingFlags {
		usage := tf.usage + " (default: the profile's)"
		if tf.dur != nil {
			f.DurationVar(tf.dur(&o.overrides), tf.flag, 0, usage)
		} else {
			f.Float64Var(&o.overrides.MaxDrift, tf.flag, 0, usage)
		}
	}
	f.StringArrayVar(&o.namespaces, "namespace", nil, "a namespace `NS` to serve besides \"default\" (repeatable)")
	f.StringArrayVar(&o.standbys, "standbys", nil, "standby Owners per range, `NS=N` (or N for the default namespace), 0 or 1: with 1 every range gets a standby on another zone, promoted with no loss notification when the holder is lost (docs/standbys.md; repeatable)")
	f.StringVar(&o.dataDir, "data-dir", "", "keep the replicated state in `DIR` (default: memory only; a restart loses every lease)")
	f.Uint64Var(&o.id, "id", 1, "this replica's `ID` in the group, a positive integer")
	f.StringVar(&o.peers, "peers", "", "the founding replicas of a new group, `ID=ADDR,…`, this one included (default: a group of one); with --join, the running group's replicas")
	f.BoolVar(&o.join, "join", false, "start empty and wait to be added to the running group --peers names (leasehold cluster add)")
	f.StringVar(&o.role, "role", manager.RoleVoter, "this replica's `ROLE`: voter, or read-replica (applies the log and serves Lookups, never votes; implies --join: add it with leasehold cluster add --read-replica)")
	f.StringVar(&o.advertise, "advertise", "", "the `ADDR` other replicas and clients reach this one at (default: --listen)")
	o.addPodFlags(f)
	f.DurationVar(&o.handover, "handover", 0, "how long an Owner gets to hand a moving range's state over before the range is recalled without it (0: one owner lease; negative: no planned moves)")
	f.IntVar(&o.drainGate, "drain-gate", 1, "how many Owners of a namespace may drain at once (the maintenance gate), at least 1")
	f.Var(newChoice(&o.rebalance, "off", "off", "weighted", "centrifuge"), "rebalance", "balance the Owners' reported load: weighted moves under a churn budget, or Centrifuge's ±10% rule (off: consistent hashing by membership)")
	f.DurationVar(&o.rebalanceEach, "rebalance-every", 5*time.Second, "how often a rebalancing round is planned")
	f.DurationVar(&o.settings.MembershipEvery, "membership-every", 0, "plan membership changes (joins, leaves, drains) at most this often, batching those that come meanwhile (0: 1s or --renew/4, the shorter; negative: each at once)")
	f.DurationVar(&o.settings.PushEvery, "push-every", 0, "push table changes to Lookups at most this often, batching those that come meanwhile (0: 100ms; negative: each at once)")
	f.DurationVar(&o.settings.RaftTick, "raft-tick", 0, "Raft's heartbeat interval (0: 100ms or --renew/20, the shorter)")
	f.IntVar(&o.settings.ElectionTicks, "election-ticks", 0, "Raft ticks without a leader before an election, randomised up to twice that (0: 10)")
	f.DurationVar(&o.settings.LearnerTimeout, "learner-timeout", 0, "how long a replica added by cluster add may take to catch up before it is removed again (0: 30s)")
	f.Uint64Var(&o.settings.SnapshotEntries, "snapshot-entries", 0, "applied Raft entries between two snapshots of the state, which compact the log (0: 10000)")
	f.Float64Var(&o.settings.MaxRequestRate, "max-request-rate", 0, "requests per second one Owner or Lookup stream may send, with bursts of twice that (0: 50)")
	f.Float64Var(&o.settings.MaxCallRate, "max-call-rate", 0, "unary calls (status, drain, cluster, lookup --read-lease) per second one connection may make, with bursts of twice that (0: 20)")
	f.IntVar(&o.settings.MaxMessageBytes, "max-message-bytes", 0, "the largest message an Owner or Lookup may send, in bytes (0: 4 MiB)")
	f.IntVar(&o.settings.MaxOwners, "max-owners", 0, "the most Owners one namespace records; a new Owner past it is refused (0: 10000)")
	f.IntVar(&o.settings.MaxRanges, "max-ranges", 0, "the most lease-table ranges one namespace has: a new or returning Owner, or a higher capacity, whose ring points could take the table past it, with the joins not yet planned, is refused (0: 1048576)")
	f.IntVar(&o.settings.MaxConnections, "max-connections", 0, "the most connections open to this replica at once (0: 50000)")
	f.IntVar(&o.settings.MaxStreamsPerConn, "max-streams-per-conn", 0, "the most streams open at once on one connection; a follower relays Owners' streams over one (0: 10000)")
	f.DurationVar(&o.settings.IdleTimeout, "idle-timeout", 0, "close a connection with no stream open for this long (0: 5m; negative: never)")
	f.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus metrics at `ADDR`/metrics, and /healthz and /readyz: HTTP with --insecure, else HTTPS that answers only a client certificate of the group's CA (docs/operations.md has a Prometheus scrape config) (default: none)")
	addReadLeaseFlags(cmd, &o.settings.ReadLease)
	f.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiles at /debug/pprof/ on the --metrics-listen address (CPU, heap, allocations, goroutines)")
	o.addGCFlag(f)
	o.addLogFlags(f, "info")
	o.addTrustFlags(f, e)
	cmd.Flags().SortFlags = false
	return cmd
}

// timing is the chosen profile with the overrides applied; config
// validates it.
func (o *managerOptions) timing() protocol.Timing {
	t := profiles[o.timings]()
	for _, tf := range timingFlags {
		switch {
		case !o.set(tf.flag):
		case tf.dur != nil:
			*tf.dur(&t) = *tf.dur(&o.overrides)
		default:
			t.MaxDrift = o.overrides.MaxDrift
		}
	}
	return t
}

func (o *managerOptions) set(flag string) bool { return o.flags != nil && o.flags.Changed(flag) }

// fieldFlags names the flag that sets each ServerConfig field an error can
// name (leasehold.ConfigError); Timing's fields are timingFlags'.
var fieldFlags = map[string]string{
	"Namespaces": "namespace", "Standbys": "standbys", "ID": "id", "Peers": "peers", "Advertise": "advertise", "DataDir": "data-dir",
	"Handover": "handover", "DrainGate": "drain-gate", "RebalanceEvery": "rebalance-every",
	"MembershipEvery": "membership-every", "PushEvery": "push-every", "RaftTick": "raft-tick",
	"ElectionTicks": "election-ticks", "SnapshotEntries": "snapshot-entries", "LearnerTimeout": "learner-timeout",
	"MaxRequestRate": "max-request-rate", "MaxCallRate": "max-call-rate", "MaxMessageBytes": "max-message-bytes",
	"MaxOwners": "max-owners", "MaxRanges": "max-ranges", "MaxConnections": "max-connections",
	"MaxStreamsPerConn": "max-streams-per-conn", "IdleTimeout": "idle-timeout",
	"ReadLease": "read-lease-holders", "ReadLease.Duration": "read-lease", "ReadLease.Renew": "read-lease-renew",
}

// usage turns a configuration the server refuses into a usage error that
// names the flags involved, with their values: the field of a
// *leasehold.ConfigError, or for an unsafe timing every timing flag set among
// the fields its *protocol.TimingError names (the profile alone is always
// safe, so at least one was set).
func (o *managerOptions) usage(err error) error {
	var fe *leasehold.ConfigError
	if !errors.As(err, &fe) {
		return err
	}
	var te *protocol.TimingError
	if !errors.As(fe.Err, &te) {
		if flag, ok := fieldFlags[fe.Field]; ok {
			return usagef("--%s: %v", flag, fe.Err)
		}
		return usageError(err)
	}
	var named []string
	for _, tf := range timingFlags {
		if o.set(tf.flag) && slices.Contains(te.Fields, tf.field) {
			named = append(named, "--"+tf.flag+" "+o.flags.Lookup(tf.flag).Value.String())
		}
	}
	if len(named) == 0 {
		return usagef("--timings %s with these overrides is unsafe: %s", o.timings, te.Why)
	}
	verb := "is"
	if len(named) > 1 {
		verb = "are"
	}
	return usagef("%s %s unsafe: %s", strings.Join(named, ", "), verb, te.Why)
}

// config validates the options and builds the server's configuration.
func (o *managerOptions) config(logger *slog.Logger) (manager.Config, error) {
	var err error
	if o.listen == "" {
		return manager.Config{}, usagef("--listen must not be empty")
	}
	var extra []string
	for _, ns := range o.namespaces {
		switch {
		case ns == "":
			return manager.Config{}, usagef("--namespace must not be empty")
		case ns == protocol.DefaultNamespace || slices.Contains(extra, ns):
			continue // served anyway
		}
		extra = append(extra, ns)
	}
	cfg := o.settings
	if cfg.Standbys, err = parseStandbys(o.standbys, extra); err != nil {
		return cfg, err
	}
	cfg.Timing, cfg.Namespaces, cfg.Handover, cfg.DrainGate, cfg.RebalanceEvery = o.timing(), extra, o.handover, o.drainGate, o.rebalanceEach
	cfg.Logger, cfg.ID, cfg.DataDir, cfg.Join, cfg.Advertise = logger, o.id, o.dataDir, o.join, o.advertise
	switch o.rebalance {
	case "weighted":
		if cfg.Rebalance, err = rebalance.Weighted(rebalance.Config{Interval: o.rebalanceEach}); err != nil {
			return cfg, usagef("--rebalance-every %v: %v", o.rebalanceEach, err)
		}
	case "centrifuge":
		cfg.Rebalance = rebalance.Centrifuge()
	}
	if err := o.applyPod(); err != nil {
		return cfg, err
	}
	switch o.role {
	case manager.RoleVoter:
	case manager.RoleReadReplica:
		o.join = true
	default:
		return cfg, usagef("--role %q: want voter or read-replica", o.role)
	}
	cfg.ID, cfg.Join, cfg.Role = o.id, o.join, o.role
	if o.rebalanceEach <= 0 {
		return cfg, usagef("--rebalance-every %v must be positive", o.rebalanceEach)
	}
	if o.id == 0 {
		return cfg, usagef("--id must be a positive integer")
	}
	if err := o.checkGC(); err != nil {
		return cfg, err
	}
	if o.drainGate < 1 {
		return cfg, usagef("--drain-gate %d must be at least 1", o.drainGate)
	}
	if cfg.Peers, err = parsePeers(o.peers); err != nil {
		return cfg, err
	}
	listed := slices.ContainsFunc(cfg.Peers, func(p manager.Peer) bool { return p.ID == o.id })
	switch {
	case o.join && len(cfg.Peers) == 0:
		return cfg, usagef("--join needs --peers: the replicas of the running group, so this one can answer them (--role read-replica implies --join)")
	case o.join && listed:
		return cfg, usagef("--join: --peers lists the running group, which --id %d is not part of yet", o.id)
	case !o.join && len(cfg.Peers) > 0 && !listed:
		return cfg, usagef("--peers does not list this replica's --id %d", o.id)
	}
	if cfg.Advertise == "" {
		for _, p := range cfg.Peers {
			if p.ID == o.id {
				cfg.Advertise = p.Addr
			}
		}
	}
	// A wildcard host is no address to reach this replica at, and was
	// advertised as [::]:PORT to the other replicas and the clients: the
	// replica must be told its address. Port 0 is: the server then
	// advertises the address its listener got.
	switch {
	case wildcardHost(cfg.Advertise):
		return cfg, usagef("--advertise %s is a wildcard, which no replica or client can dial: give the address they reach this replica at", cfg.Advertise)
	case cfg.Advertise == "" && wildcardHost(o.listen):
		return cfg, usagef("--listen %s serves every interface, which is no address for the other replicas and the clients to reach this one at: give --advertise HOST:PORT (in Kubernetes, the pod's DNS name under the headless Service)", o.listen)
	case cfg.Advertise == "" && !strings.HasSuffix(o.listen, ":0"):
		cfg.Advertise = o.listen
	}
	// The certificate is opened later (run): --insecure or --certs-dir
	// is checked there, so validate the rest as if it were chosen.
	cfg.Insecure = true
	err = cfg.Validate()
	cfg.Insecure = o.insecure
	return cfg, o.usage(err)
}

// wildcardHost reports whether addr, host:port, names every interface
// rather than a host: ":7400", "0.0.0.0:7400", "[::]:7400".
func wildcardHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

// parsePeers parses --peers: ID=ADDR pairs separated by commas.
func parsePeers(s string) ([]manager.Peer, error) {
	if s == "" {
		return nil, nil
	}
	var out []manager.Peer
	seen := map[uint64]bool{}
	for _, part := range strings.Split(s, ",") {
		idStr, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		id, err := strconv.ParseUint(idStr, 10, 64)
		if !ok || err != nil || id == 0 {
			return nil, usagef("--peers: %q is not ID=ADDR with a positive integer ID", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, usagef("--peers: replica %d's address %q: %v", id, addr, err)
		}
		if seen[id] {
			return nil, usagef("--peers: replica ID %d appears twice", id)
		}
		seen[id] = true
		out = append(out, manager.Peer{ID: id, Addr: addr})
	}
	return out, nil
}

func (o *managerOptions) run(ctx context.Context, e *env) error {
	log := o.logger(e.stderr)
	cfg, err := o.config(log)
	if err != nil {
		return err
	}
	o.resolve()
	if o.insecure { // the server warns of its own listener
		cfg.Insecure = true
		if o.metricsListen != "" {
			warnInsecure(log, o.metricsListen)
		}
	} else {
		if o.certsDir == "" {
			_, err := o.open()
			return err
		}
		if cfg.Certs, err = certs.Open(o.certsDir, certs.Replica, strconv.FormatUint(cfg.ID, 10)); err != nil {
			return usageError(fmt.Errorf("--certs-dir: %w (leasehold cert create-replica %d HOST… makes it)", err, cfg.ID))
		}
		keepFresh(ctx, cfg.Certs, log)
	}
	if err := refuseForgetful(ctx, cfg, log); err != nil {
		return err
	}
	srv, err := manager.NewServer(cfg)
	if err != nil {
		return o.usage(err) // the data directory could not be opened, or a bad setting
	}
	o.applyGC(log, e.getenv)
	lis, err := listen(o.listen, "")
	if err != nil {
		return err
	}
	defer lis.Close()

	if o.pprof && o.metricsListen == "" {
		return usagef("--pprof needs --metrics-listen: the profiles are served on the metrics listener")
	}
	if o.metricsListen != "" {
		mlis, err := listen(o.metricsListen, " for metrics")
		if err != nil {
			return err
		}
		defer serveMetrics(srv, mlis, o.pprof, log, cfg.Certs)()
		scheme := "http://"
		if cfg.Certs != nil {
			scheme = "https://"
		}
		log.Info("serving metrics", "url", scheme+mlis.Addr().String()+"/metrics")
	}

	log.Info("manager listening", "addr", lis.Addr().String(), "timings", o.timings,
		"owner_lease", cfg.Timing.OwnerLease, "renew", cfg.Timing.Renew, "manager_lease", cfg.Timing.ManagerLease,
		"sync", cfg.Timing.Sync, "sync_timeout", cfg.Timing.SyncTimeout, "log_retention", cfg.Timing.LogRetention,
		"max_drift", cfg.Timing.MaxDrift, "namespaces", append([]string{protocol.DefaultNamespace}, cfg.Namespaces...),
		"handover", handoverText(cfg), "drain_gate", cfg.DrainGate)
	fmt.Fprintf(e.stdout, "leasehold manager listening on %s (timings %s, replica %d)\n",
		lis.Addr(), o.timings, cfg.ID)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		// Asked to stop (SIGTERM, SIGINT): the Manager closes its streams
		// and its data directory at once; if something hangs, exit anyway
		// (the process's end releases the data directory's lock).
		select {
		case err = <-served:
		case <-time.After(stopBound):
			return fmt.Errorf("manager: did not stop within %s of being asked to; exiting anyway", stopBound)
		}
	}
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	log.Info("manager shut down")
	return nil
}

// stopBound is how long a Manager asked to stop may take before the
// process exits regardless.
const stopBound = 10 * time.Second

// handoverText describes the Handover setting for the log.
func handoverText(cfg manager.Config) string {
	switch {
	case cfg.Handover < 0:
		return "off"
	case cfg.Handover == 0:
		return cfg.Timing.OwnerLease.String()
	}
	return cfg.Handover.String()
}

// listen opens a TCP listener, with an error that names the address.
func listen(addr, what string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		return nil, fmt.Errorf("cannot listen on %s%s: %w", addr, what, err)
	}
	return lis, nil
}

// serveMetrics serves the Manager's metrics, and the Go runtime's and the
// process's, on lis at /metrics, with the health endpoints /healthz and
// /readyz, and with withPprof Go's profiles at /debug/pprof/, until stop
// is called. With src it serves HTTPS with src's
// certificate, and /metrics only to clients whose certificate the group's
// CA signed (any role: Prometheus may scrape with a lookup or operator
// certificate); the health endpoints say only ready or not, and answer
// anyone, so that a load balancer's probe needs no certificate.
func serveMetrics(srv *manager.Server, lis net.Listener, withPprof bool, log *slog.Logger, src *certs.Source) (stop func()) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.Collector(), version.Get().Collector(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var metrics http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	if src != nil {
		reg.MustRegister(src.Collector())
		metrics = certs.RequireHTTP(src, nil, metrics)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	srv.HandleHealth(mux)
	if withPprof {
		// Registered on this mux only: importing net/http/pprof also adds
		// the handlers to http.DefaultServeMux, which nothing here serves.
		prof := http.NewServeMux()
		prof.HandleFunc("/debug/pprof/", pprof.Index)
		prof.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		prof.HandleFunc("/debug/pprof/profile", pprof.Profile)
		prof.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		prof.HandleFunc("/debug/pprof/trace", pprof.Trace)
		var h http.Handler = prof
		if src != nil {
			// A profile shows the process's memory and command line: an
			// operator's certificate only.
			h = certs.RequireHTTP(src, func(id certs.Identity) error {
				if id.Role != certs.Operator {
					return fmt.Errorf("%s may not read profiles: /debug/pprof/ is for the operator role", id)
				}
				return nil
			}, prof)
		}
		mux.Handle("/debug/pprof/", h)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if src != nil {
		lis = tls.NewListener(lis, src.ServerTLSOpen()) // /healthz and /readyz answer anyone
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			log.Warn("stopping the metrics server", "err", err)
			_ = hs.Close()
		}
		<-done
	}
}

// parseStandbys parses --standbys: NS=N, or N for the default namespace;
// NS must be served (default or one of namespaces).
func parseStandbys(flags, namespaces []string) (map[string]int, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	out := map[string]int{}
	for _, f := range flags {
		ns, n, ok := strings.Cut(f, "=")
		if !ok {
			ns, n = protocol.DefaultNamespace, f
		}
		v, err := strconv.Atoi(strings.TrimSpace(n))
		if err != nil || v < 0 || v > lease.MaxStandbys {
			return nil, usagef("--standbys %q: want NS=N or N, N from 0 to %d", f, lease.MaxStandbys)
		}
		if ns != protocol.DefaultNamespace && !slices.Contains(namespaces, ns) {
			return nil, usagef("--standbys %q: namespace %q is not served (add --namespace %s)", f, ns, ns)
		}
		out[ns] = v
	}
	return out, nil
}
