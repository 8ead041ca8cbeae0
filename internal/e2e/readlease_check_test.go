package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// The linearizability check of TestReadLeaseFaults. Its writes are the
// Manager's: in each namespace of its own, a churning Owner joins (the
// Manager writes its incarnation and grants it every range) and leaves
// (the Manager writes the release), one Owner ID after another. A write is
// acknowledged when the Owner learns of it: the grant of key 0 when its
// OnChange reports it, the goodbye when Close returns within an Owner
// lease (Close gives up waiting for the acknowledgement only after one).
// Its reads are lease reads at every replica: Admin/Holder of key 0 and
// Admin/Status with read_lease. A read issued after a write was
// acknowledged must reflect it: once Owner X's grant is acknowledged, key
// 0 is X's until X starts to leave (or reports the key revoked); once X's
// goodbye is acknowledged, key 0 is never X's again.

// churnKey is the key whose holder the reads ask for.
const churnKey keyspace.Key = 0

// ownerFacts is what one churning Owner's writes established, as the
// Owner saw them acknowledged.
type ownerFacts struct {
	ns         string
	joined     time.Time // its grant of churnKey arrived (zero: never)
	revoked    time.Time // it first reported churnKey revoked (zero: never)
	leaveStart time.Time // Close was called
	left       time.Time // Close returned acknowledged (zero: not acknowledged)
}

// leaseRead is one lease read's outcome.
type leaseRead struct {
	replica    uint64
	ns         string
	status     bool // Admin/Status; else Admin/Holder
	start, end time.Time
	owner      string // the holder of churnKey it answered ("" none)
	index      uint64 // the log index it reflects (Holder only)
}

// history records the churn's acknowledged writes and the lease reads.
type history struct {
	gate    gate // pauses the churn between Owners
	mu      sync.Mutex
	owners  map[string]*ownerFacts // by Owner ID
	reads   []leaseRead
	refused map[uint64]int // lease reads refused (no valid lease), by replica
	errs    map[uint64]int // other failures, by replica
	lastErr map[uint64]error
}

func newHistory() *history {
	return &history{owners: map[string]*ownerFacts{}, refused: map[uint64]int{}, errs: map[uint64]int{}, lastErr: map[uint64]error{}}
}

func (h *history) facts(id string) *ownerFacts {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owners[id]
}

func (h *history) note(id string, f func(*ownerFacts)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h.owners[id])
}

func (h *history) read(r leaseRead, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.reads = append(h.reads, r)
	case grpcstatus.Code(err) == codes.FailedPrecondition:
		h.refused[r.replica]++
	default:
		h.errs[r.replica]++
		h.lastErr[r.replica] = err
	}
}

// stale is a read that missed an acknowledged write.
type stale struct {
	r    leaseRead
	what string    // what it missed
	ackd time.Time // when that was acknowledged (or the read that saw it ended)
}

func (s stale) String() string {
	kind := fmt.Sprintf("Holder at replica %d (log index %d)", s.r.replica, s.r.index)
	if s.r.status {
		kind = fmt.Sprintf("Status --read-lease at replica %d", s.r.replica)
	}
	who := s.r.owner
	if who == "" {
		who = "no owner"
	}
	return fmt.Sprintf("%s in %s, asked %s after %s, answered %s",
		kind, s.r.ns, s.r.start.Sub(s.ackd).Round(time.Microsecond), s.what, who)
}

// check returns the reads asked in [from, to) that missed a write
// acknowledged before they were asked, and the reads checked. Besides the
// churn's writes, every Holder read names the log index it reflects, and
// a read asked after another ended must reflect at least as much: the
// entries an answer reflects had taken effect (docs/protocol.md, "Why
// lease reads are linearizable"), a configuration change among them.
func (h *history) check(from, to time.Time) (bad []stale, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	bad = h.regressions(from, to)
	byNS := map[string][]string{}
	for id, f := range h.owners {
		byNS[f.ns] = append(byNS[f.ns], id)
	}
	for _, r := range h.reads {
		if r.start.Before(from) || !r.start.Before(to) {
			continue
		}
		n++
		for _, id := range byNS[r.ns] {
			f := h.owners[id]
			if !f.left.IsZero() && f.left.Before(r.start) && r.owner == id {
				bad = append(bad, stale{r, fmt.Sprintf("the goodbye of %s was acknowledged", id), f.left})
				break
			}
			if f.joined.IsZero() || !f.joined.Before(r.start) || r.owner == id {
				continue
			}
			end := f.leaveStart
			if !f.revoked.IsZero() && (end.IsZero() || f.revoked.Before(end)) {
				end = f.revoked
			}
			if end.IsZero() || r.end.Before(end) {
				bad = append(bad, stale{r, fmt.Sprintf("the grant to %s was acknowledged", id), f.joined})
				break
			}
		}
	}
	return bad, n
}

// counts returns the reads served per replica in [from, to), and the
// refused and failed ones over the whole run.
func (h *history) counts(from, to time.Time) (served map[uint64]int, refused, failed map[uint64]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	served = map[uint64]int{}
	for _, r := range h.reads {
		if !r.start.Before(from) && r.start.Before(to) {
			served[r.replica]++
		}
	}
	return served, cloneMap(h.refused), cloneMap(h.errs)
}

func cloneMap(m map[uint64]int) map[uint64]int {
	out := map[uint64]int{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// acknowledged counts the joins and goodbyes acknowledged in [from, to),
// and the goodbyes Close gave up on.
func (h *history) acknowledged(from, to time.Time) (joins, leaves, unacked int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	in := func(at time.Time) bool { return !at.IsZero() && !at.Before(from) && at.Before(to) }
	for _, f := range h.owners {
		if in(f.joined) {
			joins++
		}
		if in(f.left) {
			leaves++
		}
		if in(f.leaveStart) && f.left.IsZero() {
			unacked++
		}
	}
	return joins, leaves, unacked
}

// churn makes Manager writes in namespace ns until ctx ends: Owner ns-1
// joins, holds key 0 for hold, leaves; then ns-2; and so on.
func churn(ctx context.Context, t *testing.T, h *history, managers string, ns string, tm protocol.Timing, hold time.Duration) {
	tr := trustFor(t)
	for i := 1; ctx.Err() == nil; i++ {
		h.gate.park(ctx)
		id := fmt.Sprintf("%s-%d", ns, i)
		tr.create(t, certs.Identity{Role: certs.Owner, Name: id, Namespaces: []string{ns}}, false)
		f := &ownerFacts{ns: ns}
		h.mu.Lock()
		h.owners[id] = f
		h.mu.Unlock()
		granted := make(chan struct{})
		var once sync.Once
		o, err := owner.New(ctx, owner.Config{
			Connection: leasehold.Connection{
				Manager:   managers,
				Namespace: ns,
				Timing:    tm,
				CertsDir:  tr.dir,
			},
			ID:   id,
			Addr: "127.0.0.1:9",
			OnChange: func(ch owner.OwnershipChange) {
				now := time.Now()
				for _, l := range ch.Granted {
					if l.Range.Contains(churnKey) {
						h.note(id, func(f *ownerFacts) {
							if f.joined.IsZero() {
								f.joined = now
							}
						})
						once.Do(func() { close(granted) })
					}
				}
				for _, r := range ch.Revoked {
					if r.Contains(churnKey) {
						h.note(id, func(f *ownerFacts) {
							if f.revoked.IsZero() {
								f.revoked = now
							}
						})
					}
				}
			},
		})
		if err != nil {
			t.Errorf("churn owner %s: %v", id, err)
			return
		}
		select {
		case <-granted:
			select {
			case <-time.After(hold):
			case <-ctx.Done():
			}
		case <-time.After(settleTimeout):
		case <-ctx.Done():
		}
		leaveAt := time.Now()
		h.note(id, func(f *ownerFacts) { f.leaveStart = leaveAt })
		cctx, cancel := context.WithTimeout(context.Background(), 3*tm.OwnerLease)
		_ = o.Close(cctx)
		cancel()
		// Close waits for the goodbye's acknowledgement at most one Owner
		// lease: back sooner, it was acknowledged.
		if done := time.Now(); done.Sub(leaveAt) < tm.OwnerLease {
			h.note(id, func(f *ownerFacts) { f.left = done })
		}
	}
}

// readLoop asks replica id for lease reads until ctx ends: a Holder read
// of key 0 in each namespace in turn, every gap, and a Status read every
// tenth.
func readLoop(ctx context.Context, h *history, conn *grpc.ClientConn, id uint64, nss []string, gap time.Duration) {
	admin := pb.NewAdminClient(conn)
	for n := 0; ctx.Err() == nil; n++ {
		ns := nss[n%len(nss)]
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		start := time.Now()
		if n%10 == 9 {
			resp, err := admin.Status(rctx, &pb.StatusRequest{ReadLease: true})
			end := time.Now()
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				h.read(leaseRead{replica: id, status: true}, err)
			}
			for _, st := range resp.GetNamespaces() {
				if !slices.Contains(nss, st.GetName()) {
					continue
				}
				var holders []string
				for _, o := range st.GetOwners() {
					if o.GetRanges() > 0 {
						holders = append(holders, o.GetId())
					}
				}
				// A namespace's lone Owner holds every range, or none
				// holds any.
				h.read(leaseRead{replica: id, ns: st.GetName(), status: true, start: start, end: end,
					owner: strings.Join(holders, "+")}, nil)
			}
		} else {
			resp, err := admin.Holder(rctx, &pb.HolderRequest{Namespace: ns, Key: uint64(churnKey)})
			end := time.Now()
			cancel()
			if ctx.Err() != nil {
				return
			}
			h.read(leaseRead{replica: id, ns: ns, start: start, end: end, owner: resp.GetOwner(), index: resp.GetIndex()}, err)
		}
		select {
		case <-time.After(gap):
		case <-ctx.Done():
		}
	}
}

// regressions returns the Holder reads asked in [from, to) that reflect
// a lower log index than a read that ended before they were asked. The
// caller holds h.mu.
func (h *history) regressions(from, to time.Time) []stale {
	var hs []leaseRead
	for _, r := range h.reads {
		if !r.status {
			hs = append(hs, r)
		}
	}
	byEnd := slices.Clone(hs)
	slices.SortFunc(byEnd, func(a, b leaseRead) int { return a.end.Compare(b.end) })
	slices.SortFunc(hs, func(a, b leaseRead) int { return a.start.Compare(b.start) })
	var bad []stale
	var best leaseRead // the highest index among the reads ended so far
	j := 0
	for _, r := range hs {
		for ; j < len(byEnd) && byEnd[j].end.Before(r.start); j++ {
			if byEnd[j].index > best.index {
				best = byEnd[j]
			}
		}
		if r.index < best.index && !r.start.Before(from) && r.start.Before(to) {
			bad = append(bad, stale{r, fmt.Sprintf("replica %d's read answered at log index %d", best.replica, best.index), best.end})
		}
	}
	return bad
}

// gate pauses the churning Owners between one Owner and the next.
type gate struct {
	mu     sync.Mutex
	resume chan struct{} // non-nil while paused; closed to resume
	parked int
}

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resume == nil {
		g.resume = make(chan struct{})
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resume != nil {
		close(g.resume)
		g.resume = nil
	}
}

// park waits while the gate is paused.
func (g *gate) park(ctx context.Context) {
	g.mu.Lock()
	c := g.resume
	if c == nil {
		g.mu.Unlock()
		return
	}
	g.parked++
	g.mu.Unlock()
	select {
	case <-c:
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.parked--
	g.mu.Unlock()
}

// waitParked waits until n churners are parked, at most timeout.
func (g *gate) waitParked(n int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		g.mu.Lock()
		p := g.parked
		g.mu.Unlock()
		if p >= n {
			return true
		}
	}
	return false
}
