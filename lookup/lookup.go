package lookup

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// Config configures a Lookup. How it reaches the Manager is the embedded
// leasehold.Connection, shared with owner.Config (cfg.Manager,
// cfg.CertsDir, cfg.Insecure …). For a Lookup:
//
//   - it keeps one sync stream open, to any replica that serves it; a
//     replica that leaves a poll unanswered for a quarter of Sync is left
//     for the next (protocol.Timing.LookupAnswerWait);
//   - Namespace is the key space to follow;
//   - of Timing's MaxDrift it keeps the larger of this one and the
//     Manager's, with which it judges heartbeats (docs/protocol.md,
//     "Heartbeats");
//   - CertsDir's certificate is its lookup certificate, the one named by
//     CertName;
//   - Registerer receives its copy's age, the losses it raised and its
//     resyncs (metrics.go), labelled with the namespace; New fails if
//     another Lookup of the namespace is on the same registry.
type Config struct {
	leasehold.Connection
	// OnLoss, if set, receives every loss notification (P§2.1): the soft
	// state of those keys may be gone, so clients that stored state there
	// should republish it. Called in order on one goroutine, never
	// concurrently, shared with OnUpdate.
	OnLoss func(Loss)
	// OnUpdate, if set, receives every change applied to the copy of the
	// table, after it is applied. Same goroutine as OnLoss. A delta may be
	// merged (leasetable.Merge): a range freed and taken again within it
	// comes as one change marked ViaFree, and its LSNs may skip. Its
	// changes are those applied: without those the copy already had, and
	// with the ends and owners a compact delta leaves to the copy filled
	// in.
	OnUpdate func(Update)
	// CertName picks the lookup certificate in CertsDir
	// (lookup.<CertName>.crt); empty when it holds one.
	CertName string
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
	if err := client.Normalize("lookup", &c.Connection); err != nil {
		return err
	}
	return c.trust().Check("lookup", c.Managers)
}

// trust is how the Lookup dials: with its lookup certificate.
func (c *Config) trust() client.Trust {
	return client.Trust{DialOptions: c.DialOptions, TLS: c.TLS, CertsDir: c.CertsDir,
		Role: certs.Lookup, Name: c.CertName, Insecure: c.Insecure}
}

// Update is a change applied to the Lookup's copy of the table.
type Update struct {
	Epoch  uint64
	Update leasetable.Update
}

// Route is where Lookup sends a key: the owner holding it, its address and
// the lease it holds it under.
type Route struct {
	Owner string
	Addr  string
	LGN   keyspace.LGN
	Epoch uint64
}

// Lookup is the Lookup library: a full local copy of a namespace's lease
// table, kept in sync with the Manager, for routing requests to owners and
// learning of lost state.
type Lookup struct {
	cfg   Config
	view  atomic.Pointer[published]
	ready chan struct{} // closed at the first applied sync

	managers *client.Managers
	recv     chan *protocol.SyncResponse
	sendq    chan *pb.SyncRequest
	reopened chan struct{} // a new stream to a Manager replica was opened
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	up       *client.Upcalls[any]
	closed   atomic.Bool
	// answerWait is the current timings' LookupAnswerWait, for the
	// stream's answer deadline; the loop updates it as the Manager's
	// timings arrive.
	answerWait atomic.Int64
	// fresh (unix nanoseconds, 0: never), sync and syncTimeout are the
	// core's Fresh and timings, published by the loop for Age.
	fresh, sync, syncTimeout atomic.Int64
	started                  time.Time
	metrics                  *metrics // nil without Config.Registerer
	// syncOnly holds the replicas (their targets) on whose connection a
	// Watch's first Poll found no Watch: the Lookup speaks Sync to them.
	syncOnly sync.Map
}

type published struct {
	view  *leasetable.View
	epoch uint64
}

// New starts a Lookup. It returns at once; use WaitSynced to wait for the
// first copy of the table.
func New(ctx context.Context, cfg Config) (*Lookup, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	opts, src, err := cfg.trust().Options("lookup", cfg.Managers)
	if err != nil {
		return nil, err
	}
	managers, err := client.NewManagers(cfg.Managers, opts)
	if err != nil {
		return nil, fmt.Errorf("lookup: %w", err)
	}
	managers.CapBackoff(cfg.Timing.Sync / 4) // back within a poll of a new leader
	l := &Lookup{
		cfg:      cfg,
		ready:    make(chan struct{}),
		managers: managers,
		recv:     make(chan *protocol.SyncResponse, 64),
		sendq:    make(chan *pb.SyncRequest, 16),
		reopened: make(chan struct{}, 1),
		started:  time.Now(),
	}
	l.sync.Store(int64(cfg.Timing.Sync))
	l.syncTimeout.Store(int64(cfg.Timing.SyncTimeout))
	l.up = client.NewUpcalls(func(v any) {
		switch v := v.(type) {
		case Loss:
			if cfg.OnLoss != nil {
				cfg.OnLoss(v)
			}
		case Update:
			if cfg.OnUpdate != nil {
				cfg.OnUpdate(v)
			}
		}
	})
	l.view.Store(&published{view: leasetable.NewView()})
	if cfg.Registerer != nil && src != nil {
		if err := cfg.Registerer.Register(src.Collector()); err != nil {
			_ = managers.Close()
			return nil, fmt.Errorf("lookup: registering the certificate's expiry: %w", err)
		}
	}
	if cfg.Registerer != nil {
		if err := l.registerMetrics(cfg.Registerer); err != nil {
			_ = managers.Close()
			return nil, fmt.Errorf("lookup: registering metrics: %w", err)
		}
	}
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	core := NewCore(CoreConfig{Namespace: cfg.Namespace, Timing: cfg.Timing}, time.Now())
	l.answerWait.Store(int64(cfg.Timing.LookupAnswerWait()))
	// A sync stream on which a poll goes unanswered (no answer, no push)
	// for the answer wait is given up for another replica
	// (docs/protocol.md, "Liveness"). Any replica serves Lookups, so they
	// need no relay.
	managers.Liveness(func() time.Duration { return time.Duration(l.answerWait.Load()) }, false)
	// Any caught-up replica serves a Lookup: each starts at its own choice
	// of the replicas it was given and moves through them in its own
	// order (rendezvous hashing of a key drawn now; docs/protocol.md,
	// "Read replicas"), so Lookups spread over the followers and read
	// replicas, and those of a replica that fails spread over the rest.
	managers.Spread(rand.Uint64())
	l.wg.Add(2)
	go l.run(ctx, core)
	go l.connect(ctx)
	if src != nil {
		// Reload the certificate when it is replaced, and warn before it
		// expires.
		l.wg.Add(1)
		go func() { defer l.wg.Done(); src.Watch(ctx, cfg.Logger, 0) }()
	}
	return l, nil
}

// Lookup returns where to send a request for key: a local read of a hint
// (C§3.1). ok is false when no owner holds the key. The owner may have moved
// since; its Owner library rejects a stale request and the caller retries
// after a short backoff. Lookup never allocates and takes no lock.
func (l *Lookup) Lookup(key keyspace.Key) (Route, bool) {
	p := l.view.Load()
	owner, addr, lgn, ok := p.view.Lookup(key)
	return Route{Owner: owner, Addr: addr, LGN: lgn, Epoch: p.epoch}, ok
}

// Segments returns the current copy of the table.
func (l *Lookup) Segments() []leasetable.Segment { return l.view.Load().view.Segments() }

// LSN returns the LSN of the current copy.
func (l *Lookup) LSN() keyspace.LSN { return l.view.Load().view.LSN() }

// CopyAge says how old a Lookup's copy of the table is, and how old it may
// grow while the Lookup is in touch with the Manager.
type CopyAge struct {
	// Age is the time since the newest sync whose answer the copy reflects
	// was sent: the copy held every change the Manager made before then.
	// Before the first answer it is the time since the Lookup started.
	Age time.Duration
	// Synced is false before the first answer from the Manager.
	Synced bool
	// Quiet is the age past which the copy is known stale: the Lookup
	// polls when its copy is Sync old (heartbeats keep it younger on a
	// healthy stream) and a poll is answered within LookupAnswerWait
	// while a Manager replica serves it, so a copy in touch is never older
	// (protocol.Timing.LookupQuiet, of the Manager's timings once it has
	// answered).
	Quiet time.Duration
	// SyncTimeout is the age at which the Lookup gives up vouching for the
	// copy and reports every range lost (Loss.All).
	SyncTimeout time.Duration
}

// Stale reports whether the copy is older than a copy in touch with the
// Manager ever is (or has never synced): a Manager replica has not
// answered a poll in time. Routing from it is still right as far as it
// goes (an Owner that lost a lease refuses), but changes may be missing.
func (a CopyAge) Stale() bool { return !a.Synced || a.Age > a.Quiet }

// Age returns the age of the copy now. It reads atomics only: it is cheap
// enough to call on every request.
func (l *Lookup) Age() CopyAge {
	sync := time.Duration(l.sync.Load())
	a := CopyAge{
		Quiet:       protocol.Timing{Sync: sync}.LookupQuiet(),
		SyncTimeout: time.Duration(l.syncTimeout.Load()),
	}
	if f := l.fresh.Load(); f != 0 {
		a.Age, a.Synced = time.Since(time.Unix(0, f)), true
	} else {
		a.Age = time.Since(l.started)
	}
	return a
}

// WaitSynced waits until the Lookup has applied its first answer from the
// Manager, or ctx ends.
func (l *Lookup) WaitSynced(ctx context.Context) error {
	select {
	case <-l.ready:
		return nil
	case <-ctx.Done():
		where := "the manager at " + l.cfg.Manager
		if len(l.cfg.Managers) > 1 {
			where = "any manager at " + strings.Join(l.cfg.Managers, ", ")
		}
		return fmt.Errorf("lookup: no answer from %s: %w", where, ctx.Err())
	}
}

// Close stops the Lookup. Upcalls already queued are delivered first.
func (l *Lookup) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	l.cancel()
	l.wg.Wait()
	l.up.Close()
	return l.managers.Close()
}

func (l *Lookup) run(ctx context.Context, core *Core) {
	defer l.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	lsn, epoch := keyspace.LSN(0), uint64(0)
	var applied []Update
	for {
		// Publish the copy before any upcall, so an upcall that routes sees
		// the new owners.
		if v := core.View(); v.LSN() != lsn || core.Epoch() != epoch {
			lsn, epoch = v.LSN(), core.Epoch()
			l.view.Store(&published{view: v.Clone(), epoch: epoch})
			select {
			case <-l.ready:
			default:
				close(l.ready)
			}
		}
		reqs, losses := core.Ready()
		l.answerWait.Store(int64(core.Timing().LookupAnswerWait()))
		if f := core.Fresh(); !f.IsZero() {
			l.fresh.Store(f.UnixNano())
		}
		l.sync.Store(int64(core.Timing().Sync))
		l.syncTimeout.Store(int64(core.Timing().SyncTimeout))
		l.metrics.observe(len(losses))
		for _, loss := range losses {
			first := ""
			if len(loss.Ranges) > 0 {
				first = loss.Ranges[0].String()
			}
			l.cfg.Logger.Info("loss notification", "namespace", l.cfg.Namespace, "ranges", len(loss.Ranges),
				"first", first, "all", loss.All)
			l.up.Push(loss)
		}
		for _, u := range applied {
			l.up.Push(u)
		}
		applied = applied[:0]
		for _, r := range reqs {
			select {
			case l.sendq <- wire.SyncRequestToPB(r):
			default: // the stream is down or slow: a lost message
			}
		}
		timer.Reset(max(time.Until(core.NextDeadline()), 0))
		select {
		case <-ctx.Done():
			return
		case m := <-l.recv:
			before := core.View().LSN()
			core.Step(time.Now(), m)
			if core.View().LSN() != before {
				l.metrics.applied(m.Update.Snapshot)
			}
			if core.View().LSN() != before && l.cfg.OnUpdate != nil {
				applied = append(applied, Update{Epoch: m.Epoch, Update: core.Applied()})
			}
		case <-l.reopened:
			core.Reconnected(time.Now())
		case <-timer.C:
			core.Tick(time.Now())
		}
	}
}

// connect keeps a sync stream to a Manager replica open — a Watch and its
// Polls (client.OpenWatch), or Sync where the replica predates Watch —
// following the replicas' hints and reconnecting with backoff.
func (l *Lookup) connect(ctx context.Context) {
	defer l.wg.Done()
	opened := 0
	client.Keep(ctx, l.cfg.Logger, "sync", l.managers,
		func(ctx context.Context, cc grpc.ClientConnInterface) (client.Stream[pb.SyncRequest, pb.SyncResponse], error) {
			var st client.Stream[pb.SyncRequest, pb.SyncResponse]
			err := errSyncOnly
			target := targetOf(cc)
			if _, syncOnly := l.syncOnly.Load(target); !syncOnly {
				st, err = client.OpenWatch(ctx, cc, func() time.Duration { return time.Duration(l.answerWait.Load()) },
					(*pb.SyncResponse).GetWatch, func() {
						l.cfg.Logger.Warn("this address does not take a Lookup's Polls on its Watch's connection (a proxy between?): speaking Sync to it",
							"manager", target)
						l.syncOnly.Store(target, true)
					})
			}
			if status.Code(err) == codes.Unimplemented || errors.Is(err, errSyncOnly) {
				// A replica that predates Watch, or one whose Watch
				// the Polls cannot reach.
				st, err = pb.NewLookupsClient(cc).Sync(ctx)
			}
			if err != nil {
				return nil, err
			}
			if opened++; opened > 1 {
				// A new stream, to a replica that pushes only to Lookups
				// that asked it: sync now rather than at the next poll.
				select {
				case l.reopened <- struct{}{}:
				default:
				}
			}
			return namesStream{st, &wire.LookupNames{}}, nil
		}, l.sendq, wire.SyncResponseFromPB, l.recv)
}

// errSyncOnly stands for a Watch not tried, at an address where Polls
// cannot reach their Watch.
var errSyncOnly = errors.New("sync only")

// targetOf names the replica cc dials, for Lookup.syncOnly.
func targetOf(cc grpc.ClientConnInterface) string {
	if t, ok := cc.(interface{ Target() string }); ok {
		return t.Target()
	}
	return ""
}

// namesStream is one sync stream with its names said once
// (wire.LookupNames): each stream starts with full names again. A message
// naming an owner by a number the stream has not defined ends the stream.
type namesStream struct {
	client.Stream[pb.SyncRequest, pb.SyncResponse]
	names *wire.LookupNames
}

func (s namesStream) Send(m *pb.SyncRequest) error {
	return s.Stream.Send(s.names.Send(m))
}

func (s namesStream) Recv() (*pb.SyncResponse, error) {
	m, err := s.Stream.Recv()
	if err == nil {
		if err = s.names.Recv(m); err != nil {
			return nil, err
		}
	}
	return m, err
}
