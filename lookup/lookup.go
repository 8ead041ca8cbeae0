package lookup

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/internal/runtime"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// Config configures a Lookup.
type Config struct {
	// Manager is the Manager's address, host:port. Required.
	Manager string
	// Namespace is the key space to follow; empty means "default".
	Namespace string
	// Timing is used until the Manager's timings arrive with its first
	// answer; the zero value means protocol.Production().
	Timing protocol.Timing
	// OnLoss, if set, receives every loss notification (P§2.1): the soft
	// state of those keys may be gone, so clients that stored state there
	// should republish it. Called in order on one goroutine, never
	// concurrently, shared with OnUpdate.
	OnLoss func(Loss)
	// OnUpdate, if set, receives every change applied to the copy of the
	// table, after it is applied. Same goroutine as OnLoss.
	OnUpdate func(Update)
	// Logger receives the Lookup's logs; nil discards them.
	Logger *slog.Logger
	// DialOptions replace the default (plaintext) gRPC dial options.
	DialOptions []grpc.DialOption
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

	conn   *grpc.ClientConn
	recv   chan *protocol.SyncResponse
	sendq  chan *pb.SyncRequest
	cancel context.CancelFunc
	wg     sync.WaitGroup
	up     *runtime.Upcalls[any]
	closed atomic.Bool
}

type published struct {
	view  *leasetable.View
	epoch uint64
}

// New starts a Lookup. It returns at once; use WaitSynced to wait for the
// first copy of the table.
func New(ctx context.Context, cfg Config) (*Lookup, error) {
	if err := (runtime.Common{Manager: &cfg.Manager, Namespace: &cfg.Namespace, Timing: &cfg.Timing, Logger: &cfg.Logger}).Normalize("lookup"); err != nil {
		return nil, err
	}
	conn, err := runtime.Dial(cfg.Manager, cfg.DialOptions)
	if err != nil {
		return nil, fmt.Errorf("lookup: %w", err)
	}
	l := &Lookup{
		cfg:   cfg,
		ready: make(chan struct{}),
		conn:  conn,
		recv:  make(chan *protocol.SyncResponse, 64),
		sendq: make(chan *pb.SyncRequest, 16),
	}
	l.up = runtime.NewUpcalls(func(v any) {
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
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	core := NewCore(CoreConfig{Namespace: cfg.Namespace, Timing: cfg.Timing}, time.Now())
	l.wg.Add(2)
	go l.run(ctx, core)
	go l.connect(ctx)
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

// WaitSynced waits until the Lookup has applied its first answer from the
// Manager, or ctx ends.
func (l *Lookup) WaitSynced(ctx context.Context) error {
	select {
	case <-l.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lookup: no answer from the manager at %s: %w", l.cfg.Manager, ctx.Err())
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
	return l.conn.Close()
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
		for _, loss := range losses {
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
			if core.View().LSN() != before && l.cfg.OnUpdate != nil {
				applied = append(applied, Update{Epoch: m.Epoch, Update: m.Update})
			}
		case <-timer.C:
			core.Tick(time.Now())
		}
	}
}

// connect keeps a sync stream to the Manager open, reconnecting with backoff.
func (l *Lookup) connect(ctx context.Context) {
	defer l.wg.Done()
	client := pb.NewLookupsClient(l.conn)
	runtime.Keep(ctx, l.cfg.Logger, "sync",
		func(ctx context.Context) (runtime.Stream[pb.SyncRequest, pb.SyncResponse], error) {
			return client.Sync(ctx)
		}, l.sendq, wire.SyncResponseFromPB, l.recv)
}
