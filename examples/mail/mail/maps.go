package mail

import (
	"errors"
	stdmaps "maps"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// leases is what the mail maps need of the Owner library (tests use a fake).
type leases interface {
	CheckLeaseNow(key keyspace.Key) (owner.LeaseNum, bool)
	CheckLeaseContinuous(key keyspace.Key, n owner.LeaseNum) bool
	Held() []owner.Lease
}

var (
	errNotOwner   = errors.New("not the owner")
	errLeaseLost  = errors.New("lease lost")
	errRebuilding = errors.New("rebuilding: the user's mail map is being rebuilt from the nodes' disks; retry")
)

// lease names one grant (Porcupine's epoch): a range under one LeaseNum.
type lease struct {
	r keyspace.Range
	n owner.LeaseNum
}

// rangeMaps is one held range's mail maps: rebuilt from the disks when
// granted, kept up by deliveries since.
type rangeMaps struct {
	users  map[string]map[string]bool // user → nodes with a fragment
	known  map[string]bool            // nodes whose fragments in the range are in users
	tried  map[string]time.Time       // nodes asked and not answered yet, and when
	failed map[string]bool            // nodes whose last answer was an error
	since  time.Time                  // when the rebuild began
	took   time.Duration              // how long it took to hear from every node; 0 until then
}

// maps is an Owner's mail maps, one per held range.
type maps struct {
	mu     sync.Mutex
	leases leases
	nodes  []string             // every node's ID
	ranges map[lease]*rangeMaps // guarded by mu
	now    func() time.Time
}

func newMaps(l leases, nodes []string) *maps {
	return &maps{leases: l, nodes: nodes, ranges: map[lease]*rangeMaps{}, now: time.Now}
}

// lookup runs steps (1) and (2): the lease user's key is held under, the
// nodes with its fragments by that lease's map, and the nodes that failed
// the rebuild. Until every node answered or failed, errRebuilding: a slow
// node is waited for, never reported missing.
func (m *maps) lookup(user string) (n owner.LeaseNum, nodes, unknown []string, err error) {
	k := keyspace.KeyOf(user)
	m.mu.Lock()
	defer m.mu.Unlock()
	// Duty: check before acting — (1) is this the right server?
	n, ok := m.leases.CheckLeaseNow(k)
	if !ok {
		return n, nil, nil, errNotOwner
	}
	// (2) Duty: keep the LeaseNum with the state, and treat state stored
	// under any other as lost: another lease's map may miss fragments
	// stored while another server held the user.
	rm := m.findLocked(k, n)
	if rm == nil {
		// Duty: never rely on OnChange — it may lag the grant, so the
		// request starts the rebuild itself.
		for _, l := range m.leases.Held() {
			if l.Num == n && l.Range.Contains(k) {
				rm = m.beginLocked(lease{l.Range, n})
			}
		}
	}
	if rm == nil || slices.ContainsFunc(m.nodes, func(node string) bool { return !rm.known[node] && !rm.failed[node] }) {
		return n, nil, nil, errRebuilding
	}
	nodes = slices.Sorted(stdmaps.Keys(rm.users[user]))
	for _, node := range m.nodes {
		if !rm.known[node] {
			unknown = append(unknown, node)
		}
	}
	return n, nodes, unknown, nil
}

func (m *maps) findLocked(k keyspace.Key, n owner.LeaseNum) *rangeMaps {
	for l, rm := range m.ranges {
		if l.n == n && l.r.Contains(k) {
			return rm
		}
	}
	return nil
}

func (m *maps) beginLocked(l lease) *rangeMaps {
	rm := m.ranges[l]
	if rm == nil {
		rm = &rangeMaps{users: map[string]map[string]bool{}, known: map[string]bool{}, tried: map[string]time.Time{},
			failed: map[string]bool{}, since: m.now()}
		m.ranges[l] = rm
	}
	return rm
}

// added records node's new fragment of user under n: delivery steps (3), (4).
func (m *maps) added(user, node string, n owner.LeaseNum) error {
	k := keyspace.KeyOf(user)
	m.mu.Lock()
	defer m.mu.Unlock()
	rm := m.findLocked(k, n)
	if rm == nil {
		return errLeaseLost
	}
	rm.add(user, node)
	// Duty: check after acting, before the acknowledgement leaves — (4).
	if !m.leases.CheckLeaseContinuous(k, n) {
		return errLeaseLost
	}
	return nil
}

// changed is the Owner's OnChange upcall: a granted range's rebuild
// begins; a revoked range's maps are dropped, but what is left of a lease
// that lost part of its range keeps its map. Duty: never rely on OnChange
// — lookup starts a rebuild itself, and checks the lease.
func (m *maps) changed(ch owner.OwnershipChange) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range ch.Revoked {
		for l, rm := range m.ranges {
			if !l.r.Overlaps(r) {
				continue
			}
			delete(m.ranges, l)
			for _, rest := range keyspace.NewRangeSet(l.r).Subtract(keyspace.NewRangeSet(r)).Ranges() {
				m.ranges[lease{rest, l.n}] = rm.within(rest)
			}
		}
	}
	for _, g := range ch.Granted {
		m.beginLocked(lease{g.Range, g.Num})
	}
}

func (rm *rangeMaps) add(user, node string) {
	if rm.users[user] == nil {
		rm.users[user] = map[string]bool{}
	}
	rm.users[user][node] = true
}

// within copies the part of rm in r.
func (rm *rangeMaps) within(r keyspace.Range) *rangeMaps {
	out := &rangeMaps{users: map[string]map[string]bool{}, known: stdmaps.Clone(rm.known),
		tried: stdmaps.Clone(rm.tried), failed: stdmaps.Clone(rm.failed), since: rm.since, took: rm.took}
	for u, nodes := range rm.users {
		if r.Contains(keyspace.KeyOf(u)) {
			out.users[u] = nodes
		}
	}
	return out
}

// work lists, per range rebuilt, the nodes to ask now (never asked, or
// unanswered for retry) and marks them tried.
func (m *maps) work(retry time.Duration) map[lease][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := map[lease][]string{}
	for l, rm := range m.ranges {
		for _, node := range m.nodes {
			if at, ok := rm.tried[node]; !rm.known[node] && (!ok || now.Sub(at) >= retry) {
				rm.tried[node] = now
				out[l] = append(out[l], node)
			}
		}
	}
	return out
}

// merge adds what node's disk holds in l's range to the maps of l's lease
// (or what is left of it) if still held; an answer for a lease gone is
// thrown away. A failed answer (err) marks the node failed until it answers.
func (m *maps) merge(l lease, node string, users []string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for l2, rm := range m.ranges {
		// Duty: CheckLeaseContinuous — never mix an ended lease's state into the next.
		if l2.n != l.n || !l.r.Covers(l2.r) || !m.leases.CheckLeaseContinuous(l2.r.Start, l2.n) {
			continue
		}
		if err != nil {
			rm.failed[node] = true
			continue
		}
		for _, u := range users {
			if l2.r.Contains(keyspace.KeyOf(u)) {
				rm.add(u, node)
			}
		}
		rm.known[node] = true
		delete(rm.tried, node)
		delete(rm.failed, node)
		if len(rm.known) == len(m.nodes) && rm.took == 0 {
			rm.took = m.now().Sub(rm.since)
		}
	}
}

// Rebuild is one held range's mail map rebuild: Took is 0 until every node answered.
type Rebuild struct {
	Range keyspace.Range
	Began time.Time
	Took  time.Duration
}

func (m *maps) rebuilds() []Rebuild {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Rebuild
	for l, rm := range m.ranges {
		out = append(out, Rebuild{l.r, rm.since, rm.took})
	}
	return out
}
