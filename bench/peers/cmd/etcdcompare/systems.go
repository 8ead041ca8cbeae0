package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/bench/peers/internal/servers"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
)

func ownerID(i int) string { return fmt.Sprintf("owner-%03d", i) }

// ---- leasehold ----

type leaseholdSystem struct {
	h       *harness
	owners  []*owner.Owner
	lookups []*lookup.Lookup
	// lastDebug: when steady last printed its state (ETCDCOMPARE_DEBUG).
	lastDebug time.Time
}

func (*leaseholdSystem) name() string { return "leasehold" }

func (s *leaseholdSystem) start(ctx context.Context, addr string, h *harness) error {
	s.h = h
	for i := range h.o.owners {
		o, err := owner.New(ctx, owner.Config{
			Connection: leasehold.Connection{
				Manager:  h.ownerProxies[i].Addr(),
				Timing:   h.t,
				CertsDir: h.o.certsDir,
				Insecure: h.o.certsDir == "",
			},
			ID:   ownerID(i),
			Addr: fmt.Sprintf("10.0.%d.%d:7000", i/256, i%256),
		})
		if err != nil {
			return err
		}
		s.owners = append(s.owners, o)
	}
	s.lookups = make([]*lookup.Lookup, h.o.lookups)
	for j := range h.o.lookups {
		cb := func() { h.check(j) }
		cfg := lookup.Config{
			Connection: leasehold.Connection{
				Manager:  h.lookupProxies[j].Addr(),
				Timing:   h.t,
				CertsDir: h.o.certsDir,
				Insecure: h.o.certsDir == "",
			},
			OnUpdate: func(lookup.Update) { cb() },
			OnLoss:   func(lookup.Loss) { cb() },
		}
		if h.wire != nil {
			cfg.DialOptions = h.wire.dialOptions()
		}
		l, err := lookup.New(ctx, cfg)
		if err != nil {
			return err
		}
		s.lookups[j] = l
	}
	return nil
}

func (s *leaseholdSystem) steady() bool {
	segs := s.lookups[0].Segments()
	owners := map[string]bool{}
	free := 0
	for _, sg := range segs {
		if sg.Entry.Free() {
			free++
			continue
		}
		owners[sg.Entry.Owner] = true
	}
	lsns := map[keyspace.LSN]int{}
	for _, l := range s.lookups {
		lsns[l.LSN()]++
	}
	if os.Getenv("ETCDCOMPARE_DEBUG") != "" && time.Since(s.lastDebug) > 5*time.Second {
		s.lastDebug = time.Now()
		fmt.Fprintf(os.Stderr, "steady? lookup 0: %d owners, %d free segments; lookups by LSN: %v\n", len(owners), free, lsns)
	}
	return free == 0 && len(owners) == len(s.owners) && len(lsns) == 1
}

// probe: the starts of the victim's ranges in lookup 0's view; lookup j
// still sees the victim while it routes any of them to it.
func (s *leaseholdSystem) probe(i int) func(int) bool {
	id := ownerID(i)
	var keys []keyspace.Key
	for _, sg := range s.lookups[0].Segments() {
		if sg.Entry.Owner == id {
			keys = append(keys, sg.Range.Start)
		}
	}
	return func(j int) bool {
		l := s.lookups[j]
		if l == nil {
			return true
		}
		for _, k := range keys {
			if r, ok := l.Lookup(k); ok && r.Owner == id {
				return true
			}
		}
		return false
	}
}

// crash: the proxy is already cut; the Owner object keeps retrying a
// connection that is refused, and never says goodbye.
func (s *leaseholdSystem) crash(int) {}

func (s *leaseholdSystem) stop() {
	var wg sync.WaitGroup
	for _, l := range s.lookups {
		if l != nil {
			wg.Go(func() { l.Close() })
		}
	}
	for _, o := range s.owners {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			o.Close(ctx)
		})
	}
	wg.Wait()
}

// ---- etcd ----

const etcdPrefix = "/shards/"

type etcdOwner struct {
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
}

type etcdWatcher struct {
	cli    *clientv3.Client
	mu     sync.Mutex
	routes map[string]string // key → owner ID
	rev    int64             // revision the map is up to date with
}

type etcdSystem struct {
	h        *harness
	owners   []*etcdOwner
	watchers []*etcdWatcher
	wg       sync.WaitGroup
}

func (*etcdSystem) name() string { return "etcd" }

func newEtcdClient(addr, certsDir string) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if certsDir != "" {
		tc, err := servers.ClientTLS(certsDir)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	return clientv3.New(cfg)
}

// start: the ranges are those assign.ConsistentHash{} gives the owners
// (what the leasehold Manager assigns): owner i puts /shards/<range start>
// → its ID, all in one transaction, with its lease, then renews the lease
// every Renew with KeepAliveOnce. Each watcher gets the prefix and watches
// it from the next revision.
func (s *etcdSystem) start(ctx context.Context, _ string, h *harness) error {
	s.h = h
	var members []assign.Member
	for i := range h.o.owners {
		members = append(members, assign.Member{ID: ownerID(i)})
	}
	ranges := map[string][]string{}
	for _, sg := range (assign.ConsistentHash{}).Assign(members) {
		ranges[sg.Owner] = append(ranges[sg.Owner], fmt.Sprintf("%s%016x", etcdPrefix, uint64(sg.Range.Start)))
	}
	for i := range h.o.owners {
		cli, err := newEtcdClient(h.ownerProxies[i].Addr(), h.o.certsDir)
		if err != nil {
			return err
		}
		lease, err := cli.Grant(ctx, etcdTTL(h.t))
		if err != nil {
			return fmt.Errorf("grant: %w", err)
		}
		var ops []clientv3.Op
		for _, k := range ranges[ownerID(i)] {
			ops = append(ops, clientv3.OpPut(k, ownerID(i), clientv3.WithLease(lease.ID)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("put ranges: %w", err)
		}
		octx, cancel := context.WithCancel(ctx)
		eo := &etcdOwner{cli: cli, cancel: cancel, done: make(chan struct{})}
		s.owners = append(s.owners, eo)
		go func() {
			defer close(eo.done)
			tick := time.NewTicker(h.t.Renew)
			defer tick.Stop()
			for {
				select {
				case <-octx.Done():
					return
				case <-tick.C:
					kctx, kcancel := context.WithTimeout(octx, h.t.Renew)
					cli.KeepAliveOnce(kctx, lease.ID)
					kcancel()
				}
			}
		}()
	}
	s.watchers = make([]*etcdWatcher, h.o.lookups)
	for j := range h.o.lookups {
		cli, err := newEtcdClient(h.lookupProxies[j].Addr(), h.o.certsDir)
		if err != nil {
			return err
		}
		w := &etcdWatcher{cli: cli, routes: map[string]string{}}
		resp, err := cli.Get(ctx, etcdPrefix, clientv3.WithPrefix())
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		for _, kv := range resp.Kvs {
			w.routes[string(kv.Key)] = string(kv.Value)
		}
		w.rev = resp.Header.Revision
		s.watchers[j] = w
		s.wg.Go(func() {
			wc := cli.Watch(ctx, etcdPrefix, clientv3.WithPrefix(), clientv3.WithRev(w.rev+1))
			for wr := range wc {
				w.mu.Lock()
				for _, ev := range wr.Events {
					switch ev.Type {
					case clientv3.EventTypePut:
						w.routes[string(ev.Kv.Key)] = string(ev.Kv.Value)
					case clientv3.EventTypeDelete:
						delete(w.routes, string(ev.Kv.Key))
					}
				}
				w.rev = wr.Header.Revision
				w.mu.Unlock()
				h.check(j)
			}
		})
	}
	return nil
}

func (s *etcdSystem) steady() bool {
	want := len(s.owners) * assign.DefaultVNodes
	for _, w := range s.watchers {
		w.mu.Lock()
		n := len(w.routes)
		w.mu.Unlock()
		if n != want {
			return false
		}
	}
	return true
}

func (s *etcdSystem) probe(i int) func(int) bool {
	id := ownerID(i)
	var keys []string
	w0 := s.watchers[0]
	w0.mu.Lock()
	for k, o := range w0.routes {
		if o == id {
			keys = append(keys, k)
		}
	}
	w0.mu.Unlock()
	return func(j int) bool {
		w := s.watchers[j]
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, k := range keys {
			if w.routes[k] == id {
				return true
			}
		}
		return false
	}
}

// crash: the proxy is already cut; stop renewing and drop the client. The
// lease is not revoked, so its keys go when it expires.
func (s *etcdSystem) crash(i int) {
	o := s.owners[i]
	o.cancel()
	<-o.done
	go o.cli.Close()
}

func (s *etcdSystem) stop() {
	for _, o := range s.owners {
		o.cancel()
		<-o.done
		o.cli.Close()
	}
	for _, w := range s.watchers {
		if w != nil {
			w.cli.Close()
		}
	}
	s.wg.Wait()
}
