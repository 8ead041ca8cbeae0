package kv

import (
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// leases is what the store needs of the Owner library: the two local checks
// of the Owner API (P§2.2), and the held leases, to tell a grant that
// carries handed-over state (owner.Lease.Migrated). *owner.Owner provides
// them; tests use a fake.
type leases interface {
	CheckLeaseNow(key keyspace.Key) (owner.LeaseNum, bool)
	CheckLeaseContinuous(key keyspace.Key, n owner.LeaseNum) bool
	Held() []owner.Lease
}

var _ leases = (*owner.Owner)(nil)

var (
	// errNotOwner: step (1) failed, the request reached the wrong server.
	errNotOwner = errors.New("not the owner")
	// errLeaseLost: step (4) failed, the lease ended during the request.
	errLeaseLost = errors.New("lease lost")
	// errMoving: the key's range is being handed over to another server,
	// which will serve it with its value; a write now could be lost.
	errMoving = errors.New("moving: the key's range is being handed over to another server; retry")
	// errArriving: this server was just granted the key's range with the
	// state handed to it, and has not taken that state up yet.
	errArriving = errors.New("arriving: the key's range is being taken over with its state; retry")
)

// item is a stored value with the lease it was stored under (PRS's
// ownership handle, P§2.2).
type item struct {
	key   keyspace.Key
	value []byte // never modified after it is stored
	lease owner.LeaseNum
	seq   uint64 // the store's write counter when it was stored: orders the writes at a standby
}

// pendingItem is a value another server handed over for a range this
// server has not been granted yet (C§2.1.2). It is taken up when the range
// is granted marked migrated, and thrown away when it is granted without
// (the handover did not complete: the state the grant stands for is empty).
type pendingItem struct {
	key     keyspace.Key
	value   []byte
	from    owner.LeaseNum // the sender's lease on the range
	expires time.Time      // past the handover's deadline no grant can carry it
}

// store is the soft-state hashtable of PRS Figure 4, with planned moves:
// the values of a range leave with it when the Manager moves it (outgoing
// handovers) and arrive with it (pending items).
//
// Each operation holds mu across steps (1) to (4). Besides guarding the map,
// this orders operations on one server: an operation that saw lease n in
// step (1) cannot overwrite a value stored by a later operation under a newer
// lease, because that later operation ran either wholly before (and then step
// (1) sees the newer lease, not n) or wholly after. It also makes a
// handover's copy of a range consistent: the copy is taken, and writes on
// the range refused from then on, under one hold of mu.
type store struct {
	mu     sync.Mutex
	leases leases          // guarded by mu; nil until the Owner is started
	items  map[string]item // guarded by mu
	// moving holds the handovers whose values were copied out: writes on
	// their range under their lease are refused until the deadline (the
	// range is gone long before, unless the handover failed).
	moving map[owner.Handover]bool // guarded by mu
	// pending holds values handed over to this server, by key, until the
	// grant of their range says whether to take them up.
	pending map[string]pendingItem // guarded by mu
	// upheld is the held set as the OnChange upcalls report it: the ranges
	// of each lease whose grant was reported and not revoked since. Values
	// handed over for a lease's range arriving after its grant was reported
	// are stale. The upcalls may run a little before or after the change
	// shows in CheckLeaseNow, so neither view alone decides what is stale.
	upheld map[owner.LeaseNum]keyspace.RangeSet // guarded by mu
	// takenUp and discarded count the handed-over values taken up with a
	// migrated grant, and those thrown away.
	takenUp, discarded int // guarded by mu
	now                func() time.Time

	// roles is the Owner's standby roles (standby_store.go); nil without
	// standbys (ServerConfig.Standbys 0).
	roles standbys // guarded by mu
	// seq numbers the writes stored here, for their standby to order them.
	seq uint64 // guarded by mu
	// copies holds, by key, the values this server keeps as standby for
	// their ranges' holders, until it is promoted or the role goes.
	copies map[string]copyItem // guarded by mu
	// promoted counts the values taken up from copies by promoted grants.
	promoted int // guarded by mu
}

func newStore() *store {
	return &store{items: map[string]item{}, moving: map[owner.Handover]bool{}, pending: map[string]pendingItem{},
		upheld: map[owner.LeaseNum]keyspace.RangeSet{}, now: time.Now, copies: map[string]copyItem{}}
}

// setLeases installs the lease checker once the Owner exists.
func (s *store) setLeases(l leases) { s.setRoles(l, nil) }

// setRoles installs the lease checker and the standby roles (nil: no
// standbys).
func (s *store) setRoles(l leases, roles standbys) {
	s.mu.Lock()
	s.leases, s.roles = l, roles
	s.mu.Unlock()
}

// put stores value under key, and is done: for a range without a standby.
func (s *store) put(key string, value []byte) error {
	_, err := s.putWrite(key, value)
	return err
}

// putWrite stores value under key: PRS Figure 4's Put. With a standby on the
// key's range, it stops after step (3): the write is stored here, and is
// acknowledged only once the standby stored it too and step (4) passes
// (Server.put).
func (s *store) putWrite(key string, value []byte) (write, error) {
	k := keyspace.KeyOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	// (1) Is this the right server?
	n, ok := s.checkLeaseNowLocked(k)
	if !ok {
		return write{}, errNotOwner
	}
	// (2) Validate stored state: take up a value handed over with the
	// range first, so this write replaces it rather than the reverse; and
	// refuse a write on a range whose values were copied out to its next
	// owner, where the write would be lost.
	if err := s.settleLocked(key, k, n); err != nil {
		return write{}, err
	}
	if s.movingLocked(k, n) {
		return write{}, errMoving
	}
	sb, err := s.standbyOfLocked(k, n)
	if err != nil {
		return write{}, err
	}
	// (3) Operate, and store the lease number with the value.
	s.seq++
	s.items[key] = item{key: k, value: value, lease: n, seq: s.seq}
	w := write{key: key, k: k, value: value, seq: s.seq, lease: n, standby: sb}
	if sb.Peer != "" {
		return w, nil // the standby must store it before (4)
	}
	// (4) Did the lease cover the whole operation? If not, the value stays
	// stored under n, and step (2) of a later operation finds it stale.
	if !s.leases.CheckLeaseContinuous(k, n) {
		return write{}, errLeaseLost
	}
	return w, nil // (5) expose the result
}

// get returns the value stored under key, and whether there is one: PRS
// Figure 4's Get. found is false when this server owns the key but holds no
// valid value for it.
func (s *store) get(key string) (value []byte, found bool, err error) {
	k := keyspace.KeyOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	// (1) Is this the right server?
	n, ok := s.checkLeaseNowLocked(k)
	if !ok {
		return nil, false, errNotOwner
	}
	// (2) Validate stored state: take up a value handed over with the
	// range; a value stored under any other lease may predate another
	// server's ownership of the key, so it is stale.
	if err := s.settleLocked(key, k, n); err != nil {
		return nil, false, err
	}
	it, found := s.items[key]
	if found && (it.lease != n || !s.leases.CheckLeaseContinuous(k, it.lease)) {
		delete(s.items, key)
		it, found = item{}, false
	}
	// (3) Operate: read the value.
	value = it.value
	// (4) Did the lease cover the whole operation?
	if !s.leases.CheckLeaseContinuous(k, n) {
		return nil, false, errLeaseLost
	}
	return value, found, nil // (5) expose the result
}

func (s *store) checkLeaseNowLocked(k keyspace.Key) (owner.LeaseNum, bool) {
	if s.leases == nil {
		return owner.LeaseNum{}, false
	}
	return s.leases.CheckLeaseNow(k)
}

// settleLocked decides the fate of a value handed over for key, held now
// under lease n, before an operation on key: taken up if n is a grant
// marked migrated, thrown away if the grant was reported without. The
// OnChange upcall does the same for the whole range, but may lag the grant;
// until one of the two knows, the operation must wait (errArriving).
func (s *store) settleLocked(key string, k keyspace.Key, n owner.LeaseNum) error {
	p, ok := s.pending[key]
	if !ok {
		if _, kept := s.copies[key]; kept {
			return s.settleCopyLocked(k, n)
		}
		return nil
	}
	if !s.now().Before(p.expires) {
		delete(s.pending, key) // no grant can carry it any more
		s.discarded++
		return nil
	}
	if s.upheld[n].Contains(k) {
		// The upcall settled this range already, so the value arrived
		// after the grant: it is not the state the grant stands for.
		delete(s.pending, key)
		s.discarded++
		return nil
	}
	for _, l := range s.leases.Held() {
		// Migrated shows on the grant itself; a renewal no longer carries
		// it, so only the upcall can tell a grant without.
		if l.Range.Contains(k) && l.Num == n && l.Migrated {
			s.takeUpLocked(l)
			return nil
		}
	}
	return errArriving
}

// takeUpLocked settles the pending values in lease l's range: with a
// migrated grant they become the range's state under l, otherwise they are
// dropped. Values stored under l are valid only while l is held (step 2),
// so this holds even if l ended meanwhile.
func (s *store) takeUpLocked(l owner.Lease) {
	if promoted(l) {
		s.takeUpCopiesLocked(l)
		return
	}
	s.dropCopiesLocked(l.Range)
	for key, p := range s.pending {
		if !l.Range.Contains(p.key) {
			continue
		}
		delete(s.pending, key)
		if !l.Migrated {
			s.discarded++
			continue
		}
		if cur, ok := s.items[key]; ok && cur.lease == l.Num {
			s.discarded++
			continue // written under l already (it cannot be: writes settle first)
		}
		s.items[key] = item{key: p.key, value: p.value, lease: l.Num}
		s.takenUp++
	}
}

// movingLocked reports whether a write on k under lease n must wait: its
// range is being handed over.
func (s *store) movingLocked(k keyspace.Key, n owner.LeaseNum) bool {
	if len(s.moving) == 0 {
		return false
	}
	now := s.now()
	for h := range s.moving {
		if h.Lease == n && h.Range.Contains(k) && now.Before(h.Deadline) {
			return true
		}
	}
	return false
}

// entry is one value of a range being handed over.
type entry struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// beginHandover copies out the values of h.Range stored under h.Lease and,
// in the same hold of mu, starts refusing writes on the range, so the copy
// stays complete. (If h.Lease ended meanwhile, the Owner ignores the
// HandoverDone that follows: the copy then goes nowhere.)
func (s *store) beginHandover(h owner.Handover) ([]entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases == nil {
		return nil, false
	}
	// Values handed to this server with the range are settled already: the
	// upcall that reported the grant ran before the one asking for this
	// handover. Any left arrived after the grant and are stale.
	for key, p := range s.pending {
		if h.Range.Contains(p.key) {
			delete(s.pending, key)
			s.discarded++
		}
	}
	var out []entry
	for key, it := range s.items {
		if h.Range.Contains(it.key) && it.lease == h.Lease {
			out = append(out, entry{Key: key, Value: it.value})
		}
	}
	s.moving[h] = true
	return out, true
}

// endHandover stops refusing writes for a handover that failed: the range
// stays here until the Manager recalls it.
func (s *store) endHandover(h owner.Handover) {
	s.mu.Lock()
	delete(s.moving, h)
	s.mu.Unlock()
}

// receive keeps the values handed over for range r, held by the sender
// under from, until the range is granted here. Values of the range from
// another handover are replaced; values of keys this server holds under a
// grant already reported are stale and dropped.
func (s *store) receive(r keyspace.Range, from owner.LeaseNum, entries []entry, expires time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, p := range s.pending {
		if r.Contains(p.key) && p.from != from {
			delete(s.pending, key)
			s.discarded++
		}
	}
	for _, e := range entries {
		k := keyspace.KeyOf(e.Key)
		if n, ok := s.checkLeaseNowLocked(k); ok && s.upheld[n].Contains(k) {
			s.discarded++
			continue
		}
		s.pending[e.Key] = pendingItem{key: k, value: e.Value, from: from, expires: expires}
	}
}

// changed is the Owner's OnChange upcall: it settles the values handed
// over for each new grant, then drops what is stale — values under leases
// no longer held, handovers over, pending values past their deadline.
func (s *store) changed(ch owner.OwnershipChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases == nil {
		return
	}
	// Within a change, revocations happened first.
	for _, r := range ch.Revoked {
		gone := keyspace.NewRangeSet(r)
		for n, rs := range s.upheld {
			if rs = rs.Subtract(gone); rs.Empty() {
				delete(s.upheld, n)
			} else {
				s.upheld[n] = rs
			}
		}
	}
	for _, g := range ch.Granted {
		s.upheld[g.Num] = s.upheld[g.Num].Add(g.Range)
		s.takeUpLocked(g)
	}
	s.sweepLocked()
}

// sweep drops every value whose lease is no longer held, to free memory
// after ranges move. It runs from the Owner's OnChange upcall, which may lag;
// correctness never rests on it (step (2) catches stale values), and it only
// drops values stale by that same rule, so a late upcall cannot drop a value
// stored under a newer lease.
func (s *store) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases != nil {
		s.sweepLocked()
	}
}

func (s *store) sweepLocked() {
	// A lease counts as held if either view says so: the upcalls' or
	// CheckLeaseNow's, whichever is ahead.
	heldNow := map[owner.LeaseNum]bool{}
	for _, l := range s.leases.Held() {
		heldNow[l.Num] = true
	}
	live := func(k keyspace.Key, n owner.LeaseNum) bool {
		return s.upheld[n].Contains(k) || s.leases.CheckLeaseContinuous(k, n)
	}
	for key, it := range s.items {
		if !live(it.key, it.lease) {
			delete(s.items, key)
		}
	}
	now := s.now()
	for h := range s.moving {
		if !now.Before(h.Deadline) || !heldNow[h.Lease] && s.upheld[h.Lease].Empty() {
			delete(s.moving, h)
		}
	}
	for key, p := range s.pending {
		if !now.Before(p.expires) {
			delete(s.pending, key)
			s.discarded++
		}
	}
	s.sweepCopiesLocked()
}

// len returns the number of stored values, stale or not.
func (s *store) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// handedIn returns how many values handed to this server are pending, were
// taken up, and were thrown away.
func (s *store) handedIn() (pending, takenUp, discarded int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending), s.takenUp, s.discarded
}
