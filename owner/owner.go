package owner

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// Config configures an Owner. How it reaches the Manager is the embedded
// leasehold.Connection, shared with lookup.Config (cfg.Manager,
// cfg.CertsDir, cfg.Insecure …). For an Owner:
//
//   - it keeps one lease stream open, to the leader; a replica that leaves
//     a request unanswered for half a renewal is left for the next
//     (protocol.Timing.OwnerAnswerWait), and if the next names as leader
//     the one that went silent, it is asked to relay the stream there
//     (docs/protocol.md, "Liveness");
//   - Namespace is the key space to join;
//   - CertsDir's certificate is the one of this Owner's ID (owner.<ID>.crt);
//   - Registerer receives the time left on its shortest lease, its
//     renewals' round trips, CheckLeaseNow's refusals and the ranges it
//     holds (metrics.go), labelled with the namespace and ID; New fails if
//     another Owner with the same ID is on the same registry.
type Config struct {
	leasehold.Connection
	// ID names this server. It must be unique among live Owners and should
	// stay the same across restarts. Required.
	ID string
	// Addr is where frontends reach this server; Lookups return it. Required.
	Addr string
	// OnChange, if set, is called after every change of the held set, in
	// order, on one goroutine, never concurrently. It may lag the change a
	// little; correctness must rest on CheckLeaseNow and
	// CheckLeaseContinuous, never on the upcall (P§2.2).
	OnChange func(OwnershipChange)
	// Handovers says the application moves state between Owners: OnChange
	// receives the planned moves (OwnershipChange.Handovers), and for each
	// the application copies the range's state to the target and calls
	// HandoverDone; a grant marked Migrated then carries that state. Without
	// it the Owner gives a range up as soon as the Manager asks to move it,
	// and the state is reported lost (C§2.1.2).
	Handovers bool
	// Capacity weighs this server's share of the load against the others'
	// (a server of capacity 2 is given twice the load of one of capacity
	// 1); 0 means 1.
	Capacity float64
	// ConfirmReleases is for an Owner that serves on behalf of another
	// process (the agent, docs/agent.md): a range given up before its lease
	// ends stays listed to the Manager, though CheckLeaseNow refuses it,
	// until Released names it or its lease would have run out
	// (CoreConfig.ConfirmReleases). A linked server leaves it off.
	ConfirmReleases bool
	// Zone is this server's failure domain (a rack, a zone; at most
	// protocol.MaxZoneLen bytes). In a namespace with standbys the Manager
	// puts each range's standby in another zone than its holder's when one
	// has capacity (docs/design.md rule 22).
	Zone string
}

// Validate reports a Config that New would refuse: a field out of its
// limits as a *leasehold.ConfigError naming it, unsafe timings as the
// *protocol.TimingError of Timing.Validate, and no way to dial (none of
// DialOptions, TLS, CertsDir, Insecure). It checks a copy with the
// defaults New fills in; it opens no file and dials nothing.
func (c Config) Validate() error {
	return c.normalize()
}

// normalize fills in the defaults and checks c (Validate).
func (c *Config) normalize() error {
	if err := client.Normalize("owner", &c.Connection); err != nil {
		return err
	}
	bad := func(field, why string) error { return &leasehold.ConfigError{Package: "owner", Field: field, Why: why} }
	switch {
	case c.ID == "":
		return bad("ID", "is required")
	case c.Addr == "":
		return bad("Addr", "(where frontends reach this owner) is required")
	}
	if err := client.CheckName("owner", "ID", c.ID); err != nil {
		return err
	}
	if c.Capacity < 0 || c.Capacity > wire.MaxCapacity || c.Capacity != c.Capacity {
		return bad("Capacity", fmt.Sprintf("%v: want a number in [0, %d] (0 means 1)", c.Capacity, wire.MaxCapacity))
	}
	if err := client.CheckName("owner", "Addr", c.Addr); err != nil {
		return err
	}
	if err := checkZone(c.Zone); err != nil {
		return err
	}
	return c.trust().Check("owner", c.Managers)
}

// trust is how the Owner dials: with its own certificate, of its ID.
func (c *Config) trust() client.Trust {
	return client.Trust{DialOptions: c.DialOptions, TLS: c.TLS, CertsDir: c.CertsDir,
		Role: certs.Owner, Name: c.ID, Insecure: c.Insecure}
}

// Owner is the Owner library: it keeps this server's leases with the
// Manager and answers, locally and at once, whether a key is held.
type Owner struct {
	cfg  Config
	held atomic.Pointer[published] // published by the loop
	base time.Time                 // deadlines are offsets from here, on the monotonic clock

	managers *client.Managers
	recv     chan *protocol.LeaseResponse
	sendq    chan *pb.LeaseRequest
	reopened chan struct{} // a new stream to a Manager replica was opened
	leave    chan chan struct{}
	drain    chan chan struct{}
	done     chan doneMsg
	released chan []keyspace.Range // Released's ranges, for the loop
	load     loadMeter
	cancel   context.CancelFunc
	stopped  <-chan struct{} // closed when the Owner stops
	wg       sync.WaitGroup
	up       *client.Upcalls[OwnershipChange]
	roles    atomic.Pointer[roles] // the pairings, published by the loop (standby.go)
	insync   chan inSyncMsg        // InSync's reports, for the loop
	closed   atomic.Bool
	// answerWait is the current timings' OwnerAnswerWait, for the stream's
	// answer deadline; the loop updates it as the Manager's timings arrive.
	answerWait atomic.Int64

	metrics  *metrics      // nil without Config.Registerer; the loop's
	refusals atomic.Uint64 // CheckLeaseNow calls that found no lease
	lost     atomic.Uint64 // leases that ran out unrenewed (Core.Expired)
	renew    atomic.Int64  // the current renewal interval, for the metrics
}

// New starts an Owner: it joins the namespace and keeps its leases until
// Close. It returns at once; leases arrive as the Manager grants them.
func New(ctx context.Context, cfg Config) (*Owner, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	opts, src, err := cfg.trust().Options("owner", cfg.Managers)
	if err != nil {
		return nil, err
	}
	managers, err := client.NewManagers(cfg.Managers, opts)
	if err != nil {
		return nil, fmt.Errorf("owner: %w", err)
	}
	managers.CapBackoff(cfg.Timing.Renew / 2) // back within a renewal of a new leader
	o := &Owner{
		cfg:      cfg,
		managers: managers,
		recv:     make(chan *protocol.LeaseResponse, 16),
		sendq:    make(chan *pb.LeaseRequest, 16),
		reopened: make(chan struct{}, 1),
		leave:    make(chan chan struct{}),
		drain:    make(chan chan struct{}),
		done:     make(chan doneMsg, 16),
		released: make(chan []keyspace.Range, 16),
		insync:   make(chan inSyncMsg, 16),
		up:       client.NewUpcalls(cfg.OnChange),
	}
	o.base = time.Now()
	o.held.Store(&published{})
	o.roles.Store(&roles{})
	o.answerWait.Store(int64(cfg.Timing.OwnerAnswerWait()))
	o.renew.Store(int64(cfg.Timing.Renew))
	if cfg.Registerer != nil && src != nil {
		if err := cfg.Registerer.Register(src.Collector()); err != nil {
			_ = managers.Close()
			return nil, fmt.Errorf("owner: registering the certificate's expiry: %w", err)
		}
	}
	if cfg.Registerer != nil {
		if err := o.registerMetrics(cfg.Registerer); err != nil {
			_ = managers.Close()
			return nil, fmt.Errorf("owner: registering metrics: %w", err)
		}
	}
	// A lease stream on which a request goes unanswered for the answer wait
	// is given up for another replica, or relayed through one, in time to
	// renew before the lease ends (docs/protocol.md, "Liveness").
	managers.Liveness(func() time.Duration { return time.Duration(o.answerWait.Load()) }, true)
	ctx, o.cancel = context.WithCancel(context.WithoutCancel(ctx))
	o.stopped = ctx.Done()
	o.load.since = time.Now()
	core := NewCore(CoreConfig{
		Namespace: cfg.Namespace, ID: cfg.ID, Addr: cfg.Addr,
		Incarnation: uint64(time.Now().UnixNano()), Timing: cfg.Timing,
		Seed: uint64(time.Now().UnixNano()), Handovers: cfg.Handovers, Capacity: cfg.Capacity,
		Load: o.report, ConfirmReleases: cfg.ConfirmReleases, Zone: cfg.Zone,
	})
	o.wg.Add(2)
	go o.run(ctx, core)
	go o.connect(ctx)
	if src != nil {
		// Reload the certificate when it is replaced, and warn before it
		// expires.
		o.wg.Add(1)
		go func() { defer o.wg.Done(); src.Watch(ctx, cfg.Logger, 0) }()
	}
	return o, nil
}

// CheckLeaseNow reports whether this Owner holds a lease covering key now,
// and its number (C§3.2 step 1; PRS's GetOwnershipHandle). It is a local
// read: no message, no lock, no allocation.
//
// Every call counts as one request on the key's range: the counts (and the
// busiest keys, sampled) are reported to the Manager, which balances load
// on them.
func (o *Owner) CheckLeaseNow(key keyspace.Key) (LeaseNum, bool) {
	h := o.held.Load()
	i, ok := findLease(h.leases, key)
	// time.Since on a monotonic base reads only the monotonic clock.
	if !ok || time.Since(o.base) >= h.until[i] {
		o.refusals.Add(1)
		return LeaseNum{}, false
	}
	if h.hits[i].Add(1)%hotSample == 0 { // one call in 64 on the range

		o.load.sample(key)
	}
	return h.leases[i].Num, true
}

// published is the held leases as published for CheckLeaseNow: sorted and
// disjoint, with each expiry as an offset from Owner.base, and the requests
// counted on each since it was published.
type published struct {
	leases []Lease
	until  []time.Duration
	hits   []atomic.Uint64
}

func (o *Owner) publish(leases []Lease) {
	h := &published{leases: leases, until: make([]time.Duration, len(leases)), hits: make([]atomic.Uint64, len(leases))}
	for i, l := range leases {
		h.until[i] = l.Expiry.Sub(o.base)
	}
	o.load.fold(o.held.Swap(h))
}

// HandoverDone ends a planned move the Owner passed up in
// OwnershipChange.Handovers: ok says the application handed the range's
// state over to h.To (which keeps it until it is granted the range, marked
// Migrated). The Owner then gives the range up at once. With !ok the
// Manager recalls the range at the deadline and the state is reported lost.
func (o *Owner) HandoverDone(h Handover, ok bool) {
	select {
	case o.done <- doneMsg{h, ok}:
	case <-o.stopped: // closed: the Manager recalls at the deadline
	}
}

type doneMsg struct {
	h  Handover
	ok bool
}

// report is the core's load source: the requests counted per range and the
// hot keys since the last report.
func (o *Owner) report(now time.Time) ([]protocol.RangeLoad, []protocol.KeyLoad, time.Duration) {
	o.load.fold(o.held.Load())
	return o.load.take(now)
}

// CheckLeaseContinuous reports whether key has been covered by lease n,
// without a gap, until now (C§3.2 step 4; PRS's CheckContinuousOwnership).
// State stored under n is valid while this holds.
func (o *Owner) CheckLeaseContinuous(key keyspace.Key, n LeaseNum) bool {
	cur, ok := o.CheckLeaseNow(key)
	return ok && cur == n
}

// Held returns the leases held now.
func (o *Owner) Held() []Lease {
	now := time.Now()
	var out []Lease
	for _, l := range o.held.Load().leases {
		if now.Before(l.Expiry) {
			out = append(out, l)
		}
	}
	return out
}

// Close leaves gracefully. First it drains: it asks the Manager to move
// every range away, and with Config.Handovers the application hands each
// range's state over as it goes, so nothing is lost (C§2.1.2). It waits
// for the ranges to move until ctx ends (or three owner leases if ctx has
// no deadline), and longer while the Manager's maintenance gate holds the
// drain back. Then it gives up what is left, tells the Manager it is
// leaving, and waits for the acknowledgement at most one owner lease: the
// ranges left then move without their state. The last OnChange upcall is
// delivered before Close returns. A ctx that is already done skips the
// drain.
//
// An Owner that holds no lease has nothing to hand over: it skips the
// drain, and waits for the goodbye's acknowledgement at most idleLeaveWait,
// not at all when no stream to the Manager works. So a server that holds
// nothing (the Manager is unreachable, or refuses it) stops at once.
func (o *Owner) Close(ctx context.Context) error {
	if !o.closed.CompareAndSwap(false, true) {
		return nil
	}
	idle := len(o.Held()) == 0
	if ctx.Err() == nil && !idle {
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if _, ok := ctx.Deadline(); !ok {
			dctx, cancel = context.WithTimeout(ctx, 3*o.cfg.Timing.OwnerLease)
		}
		if o.Drain(dctx) != nil {
			o.cfg.Logger.Warn("owner: leaving before every range moved away; the rest move without their state")
		}
		cancel()
	}
	done := make(chan struct{})
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*o.cfg.Timing.OwnerLease)
	defer cancel()
	switch {
	case ctx.Err() != nil:
		lctx = ctx
	case idle:
		wait := idleLeaveWait
		if o.managers.Current() == "" {
			wait = 0 // no stream works: nobody to say goodbye to
		}
		var icancel context.CancelFunc
		lctx, icancel = context.WithTimeout(lctx, wait)
		defer icancel()
	}
	select {
	case o.leave <- done:
		select {
		case <-done:
		case <-lctx.Done():
		}
	case <-lctx.Done():
	}
	o.cancel()
	o.wg.Wait()
	o.up.Close()
	return o.managers.Close()
}

// idleLeaveWait bounds how long Close waits for the acknowledgement of an
// idle Owner's goodbye: on a working stream it comes in a round trip, and
// without it the Manager forgets the Owner when its lease runs out, which
// costs nothing, since it holds no lease.
const idleLeaveWait = time.Second

// run owns the core: every step happens here.
func (o *Owner) run(ctx context.Context, core *Core) {
	defer o.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var leaving, draining chan struct{}
	var leaveBy time.Time // give up waiting for the goodbye's acknowledgement
	for {
		reqs, changes := core.Ready()
		if lost := core.Expired(); lost > o.lost.Load() {
			// A live Owner's leases ran out: its ranges go with their
			// state. Say what its lease stream looked like.
			o.cfg.Logger.Warn("owner: leases ran out before a renewal reached this Owner; their ranges are released",
				"namespace", o.cfg.Namespace, "owner", o.cfg.ID, "leases", lost-o.lost.Load(),
				"last_answer_in_order", core.inOrder.Format(time.RFC3339Nano), "raced_answers_since", core.raced)
			o.lost.Store(lost)
		}
		o.answerWait.Store(int64(core.Timing().OwnerAnswerWait()))
		o.renew.Store(int64(core.Timing().Renew))
		// Publish first: an upcall reporting a grant must find it held.
		// The pairings go before the held set, so that a write seeing a
		// new lease also sees its standby (publishRoles).
		o.publishRoles(core)
		o.publish(core.Held(time.Now()))
		for _, c := range changes {
			o.logChange(c)
			o.up.Push(c)
		}
		for _, r := range reqs {
			select {
			case o.sendq <- wire.LeaseRequestToPB(r):
				o.metrics.requestSent(r.Seq, time.Now())
			default: // the stream is down or slow: a lost message
			}
		}
		next := core.NextDeadline()
		if st, heard := core.DrainState(); draining != nil && heard &&
			(st == protocol.DrainNone || st == protocol.DrainActive && len(core.Held(time.Now())) == 0) {
			close(draining) // everything moved away (or the Manager does not drain)
			draining = nil
		}
		if leaving != nil {
			if core.Left() || !time.Now().Before(leaveBy) {
				close(leaving) // acknowledged, or the lease is over anyway
				leaving = nil
			} else if leaveBy.Before(next) {
				next = leaveBy
			}
		}
		timer.Reset(max(time.Until(next), 0))
		select {
		case <-ctx.Done():
			return
		case m := <-o.recv:
			o.metrics.answered(m.AckSeq, time.Now())
			core.Step(time.Now(), m)
		case <-o.reopened:
			core.Reconnected(time.Now())
		case <-timer.C:
			core.Tick(time.Now())
		case d := <-o.done:
			core.HandoverDone(time.Now(), d.h, d.ok)
			for more := true; more; { // handovers finished together: one request
				select {
				case d := <-o.done:
					core.HandoverDone(time.Now(), d.h, d.ok)
				default:
					more = false
				}
			}
		case rs := <-o.released:
			core.Released(time.Now(), rs)
		case m := <-o.insync:
			core.InSync(time.Now(), m.lease, m.sgn, m.pieces)
		case done := <-o.drain:
			core.Drain(time.Now())
			draining = done
		case done := <-o.leave:
			core.Leave(time.Now())
			leaving, leaveBy = done, time.Now().Add(core.Timing().OwnerLease)
		}
	}
}

// connect keeps a lease stream to the Manager's leader open, following it
// from replica to replica and reconnecting with backoff.
func (o *Owner) connect(ctx context.Context) {
	defer o.wg.Done()
	opened := 0
	client.Keep(ctx, o.cfg.Logger, "lease", o.managers,
		func(ctx context.Context, cc grpc.ClientConnInterface) (client.Stream[pb.LeaseRequest, pb.LeaseResponse], error) {
			st, err := pb.NewLeasesClient(cc).Session(ctx)
			if err != nil {
				return nil, err
			}
			if opened++; opened > 1 {
				// A new stream, perhaps to a new leader: renew on it now
				// rather than at the next renewal (15 s in production).
				select {
				case o.reopened <- struct{}{}:
				default:
				}
			}
			return namesStream{st, &wire.OwnerNames{}}, nil
		}, o.sendq, wire.LeaseResponseFromPB, o.recv)
}

// logChange logs a change of the held set: each grant, revocation and
// planned move at debug level, with the range and LGN.
func (o *Owner) logChange(c OwnershipChange) {
	log := o.cfg.Logger
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	for _, l := range c.Granted {
		log.Debug("lease granted", "namespace", o.cfg.Namespace, "owner", o.cfg.ID, "range", l.Range.String(),
			"lgn", l.Num.LGN, "epoch", l.Num.Epoch, "migrated", l.Migrated)
	}
	for _, r := range c.Revoked {
		log.Debug("lease revoked", "namespace", o.cfg.Namespace, "owner", o.cfg.ID, "range", r.String())
	}
	for _, h := range c.Handovers {
		log.Debug("handover asked", "namespace", o.cfg.Namespace, "owner", o.cfg.ID, "range", h.Range.String(),
			"lgn", h.Lease.LGN, "to", h.To)
	}
}

// namesStream is one lease stream with its names said once
// (wire.OwnerNames): each stream starts with full names again.
type namesStream struct {
	pb.Leases_SessionClient
	names *wire.OwnerNames
}

func (s namesStream) Send(m *pb.LeaseRequest) error {
	return s.Leases_SessionClient.Send(s.names.Send(m))
}

func (s namesStream) Recv() (*pb.LeaseResponse, error) {
	m, err := s.Leases_SessionClient.Recv()
	if err == nil {
		s.names.Recv(m)
	}
	return m, err
}
