package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/protocol"
)

// The load driver of a loopback point: it starts the Lookups, waits for
// the Owners to hold and the Lookups to settle, churns clients, measures
// how long a loss takes to reach every Lookup, and reads what the
// processes used.

// loadDriver runs the Lookups of one point, and its Owners in a process
// of their own (loopback_owners.go).
type loadDriver struct {
	ctx     context.Context
	addrs   []string // the Lookups' Managers: the leader, or the read replicas only
	timing  protocol.Timing
	meter   *wireMeter
	trust   *loopbackTrust // nil: plaintext
	owners  *ownerProc
	nOwners int
	perConn int  // thin Lookups per connection (1: each its own)
	sync    bool // thin Lookups open Sync streams rather than Watches

	sharedMu sync.Mutex
	shared   map[int]*sharedLink // by j / perConn

	mu      sync.Mutex
	lookups []*lookupClient
	gone    []*lookupClient // stopped Lookups, kept for their arrivals
	wg      sync.WaitGroup
}

// startLookups starts the Lookups, evenly over spread, the full ones
// first.
func (d *loadDriver) startLookups(n int, spread time.Duration) error {
	d.lookups = make([]*lookupClient, n)
	start := time.Now()
	for j := range n {
		if !sleepCtx(d.ctx, time.Until(start.Add(spread*time.Duration(j)/time.Duration(n)))) {
			return d.ctx.Err()
		}
		c, err := d.startLookup(j, j < loopbackFull)
		if err != nil {
			return err
		}
		d.mu.Lock()
		d.lookups[j] = c
		d.mu.Unlock()
	}
	return nil
}

// startLookup starts the Lookup of slot j, with the slot's certificate if
// the run has TLS.
// With more than one thin Lookup per connection, the thin Lookups share
// connections perConn to one (each dialled with the certificate of the
// first slot to use it), each with a stream of its own, dealt round the
// connections in the order they start: Lookups started one after another
// take their snapshots over different connections, so that no connection's
// flow-control window (16 MB) holds a burst of snapshots that keeps a
// Lookup's answer past LookupAnswerWait (at 1,000 Owners a snapshot is
// about 2 MB, and fifty Lookups started in a row on one connection made
// their streams time out and ask for snapshots again, without end).
func (d *loadDriver) startLookup(j int, full bool) (*lookupClient, error) {
	if full || d.perConn <= 1 {
		creds, err := d.trust.creds(certs.Lookup, lookupName(j))
		if err != nil {
			return nil, err
		}
		return startLookup(d.ctx, d.addrs, full, d.sync, d.timing, d.meter, creds)
	}
	d.mu.Lock()
	thin := len(d.lookups) - loopbackFull
	d.mu.Unlock()
	g := (j - loopbackFull) % ((thin + d.perConn - 1) / d.perConn)
	d.sharedMu.Lock()
	defer d.sharedMu.Unlock()
	s := d.shared[g]
	if s == nil {
		creds, err := d.trust.creds(certs.Lookup, lookupName(j))
		if err != nil {
			return nil, err
		}
		if s, err = newSharedLink(d.addrs, d.meter, creds); err != nil {
			return nil, err
		}
		if d.shared == nil {
			d.shared = map[int]*sharedLink{}
		}
		d.shared[g] = s
	}
	return startSharedLookup(d.ctx, s, d.sync, d.timing, d.meter), nil
}

// ownersHold reports whether every Owner holds a lease.
func (d *loadDriver) ownersHold() (bool, error) {
	st, err := d.owners.call("holds")
	return st.Holds, err
}

func ownerID(k int) string { return fmt.Sprintf("owner-%05d", k) }

// settled reports whether every Owner holds a lease, every Lookup has
// synced, and the first full Lookup's copy has every range owned, by as
// many Owners as there are.
func (d *loadDriver) settled() (bool, error) {
	if hold, err := d.ownersHold(); !hold || err != nil {
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lookups {
		if l == nil {
			return false, nil
		}
		if s, _ := l.arr.state(); s.IsZero() {
			return false, nil
		}
	}
	ref := d.lookups[0].full
	if ref == nil {
		return false, nil
	}
	names := map[string]bool{}
	for _, s := range ref.Segments() {
		if s.Entry.Owner == "" {
			return false, nil
		}
		names[s.Entry.Owner] = true
	}
	return len(names) == d.nOwners, nil
}

// synced counts the Lookups that have applied an update.
func (d *loadDriver) synced() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, l := range d.lookups {
		if l != nil {
			if s, _ := l.arr.state(); !s.IsZero() {
				n++
			}
		}
	}
	return n
}

// refState describes the first Lookup's copy: its free segments and the
// Owners it names.
func (d *loadDriver) refState() string {
	d.mu.Lock()
	ref := d.lookups[0]
	d.mu.Unlock()
	if ref == nil || ref.full == nil {
		return "no copy"
	}
	free, names := 0, map[string]bool{}
	for _, s := range ref.full.Segments() {
		if s.Entry.Owner == "" {
			free++
		}
		names[s.Entry.Owner] = true
	}
	return fmt.Sprintf("%d free segments and %d Owners", free, len(names))
}

// churn restarts Lookups until ctx ends, while the Owner process churns
// its Owners (ownerSet.churn): every Renew/10 a Lookup stops and a new one
// starts after Renew/3 (a full one in the place of a full one). It returns
// how many of each stopped.
func (d *loadDriver) churn(ctx context.Context, rng *rand.Rand) (owners, lookups int, err error) {
	if _, err := d.owners.call("churn 1"); err != nil {
		return 0, 0, err
	}
	lookupEvery, lookupDown := d.timing.Renew/10, d.timing.Renew/3
	lt := time.NewTicker(lookupEvery)
	defer lt.Stop()
	for {
		select {
		case <-ctx.Done():
			st, err := d.owners.call("churn 0")
			return st.Stopped, lookups, err
		case <-lt.C:
			d.mu.Lock()
			j := rng.IntN(len(d.lookups))
			c := d.lookups[j]
			d.lookups[j] = nil
			if c != nil {
				d.gone = append(d.gone, c)
			}
			d.mu.Unlock()
			if c == nil {
				continue
			}
			lookups++
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				c.close()
				if !sleepCtx(d.ctx, lookupDown) {
					return
				}
				n, err := d.startLookup(j, c.full != nil)
				if err != nil {
					return
				}
				d.mu.Lock()
				d.lookups[j] = n
				d.mu.Unlock()
			}()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// propagation measures, for each change the Manager applied with a loss
// notification, the time from its apply (the Manager's log) to the moment
// the last Lookup applied it (the driver's clock). A Lookup counts for a
// change if it had synced before the change and either applied it or was
// still running at the end; one stopped before it applied the change is
// left out (it cannot be said when it would have).
func (d *loadDriver) propagation(changes []lossLine) (lags []time.Duration, unreached int) {
	d.mu.Lock()
	all := slices.Clone(d.gone)
	for _, l := range d.lookups {
		if l != nil {
			all = append(all, l)
		}
	}
	d.mu.Unlock()
	for _, ch := range changes {
		var last time.Time
		missed := false
		for _, l := range all {
			synced, stopped := l.arr.state()
			if synced.IsZero() || !synced.Before(ch.at) {
				continue
			}
			at, ok := l.arr.reached(ch.lsn)
			switch {
			case ok && (stopped.IsZero() || at.Before(stopped)):
				if at.After(last) {
					last = at
				}
			case stopped.IsZero():
				missed = true
			}
		}
		if missed {
			unreached++
			continue
		}
		if !last.IsZero() {
			lags = append(lags, max(last.Sub(ch.at), 0))
		}
	}
	return lags, unreached
}

func (d *loadDriver) stopAll() {
	d.mu.Lock()
	lookups := slices.Clone(d.lookups)
	d.mu.Unlock()
	var wg sync.WaitGroup
	if d.owners != nil {
		wg.Go(d.owners.stop)
	}
	for _, l := range lookups {
		if l != nil {
			wg.Add(1)
			go func() { defer wg.Done(); l.close() }()
		}
	}
	wg.Wait()
	d.sharedMu.Lock()
	for _, s := range d.shared {
		s.close()
	}
	d.sharedMu.Unlock()
}

// usage is a snapshot of the counters a window is measured between.
type usage struct {
	at                   time.Time
	mgrCPU, driverCPU    time.Duration
	in, out, msgIn, msgO int64
	warnings             int64
}

// usage reads the counters: the Manager's CPU (pid), the driver's (its
// own process and the Owner process), and the bytes, messages and warnings
// of both.
func (d *loadDriver) usage(pid int) (usage, error) {
	c, err := procCPU(pid)
	if err != nil {
		return usage{}, err
	}
	self, err := procCPU(os.Getpid())
	if err != nil {
		return usage{}, err
	}
	owners, err := procCPU(d.owners.cmd.Process.Pid)
	if err != nil {
		return usage{}, fmt.Errorf("the Owner process: %w", err)
	}
	st, err := d.owners.call("meter")
	if err != nil {
		return usage{}, err
	}
	return usage{at: time.Now(), mgrCPU: c, driverCPU: self + owners,
		in: d.meter.in.Load() + st.In, out: d.meter.out.Load() + st.Out,
		msgIn: d.meter.msgIn.Load() + st.MsgIn, msgO: d.meter.msgOut.Load() + st.MsgOut,
		warnings: d.meter.warnings.Load() + st.Warnings}, nil
}
