package kv

import (
	"errors"
	"sync"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// leases is what the store needs of the Owner library: the two local checks
// of the Owner API (P§2.2). *owner.Owner provides them; tests use a fake.
type leases interface {
	CheckLeaseNow(key keyspace.Key) (owner.LeaseNum, bool)
	CheckLeaseContinuous(key keyspace.Key, n owner.LeaseNum) bool
}

var _ leases = (*owner.Owner)(nil)

var (
	// errNotOwner: step (1) failed, the request reached the wrong server.
	errNotOwner = errors.New("not the owner")
	// errLeaseLost: step (4) failed, the lease ended during the request.
	errLeaseLost = errors.New("lease lost")
)

// item is a stored value with the lease it was stored under (PRS's
// ownership handle, P§2.2).
type item struct {
	key   keyspace.Key
	value []byte // never modified after it is stored
	lease owner.LeaseNum
}

// store is the soft-state hashtable of PRS Figure 4.
//
// Each operation holds mu across steps (1) to (4). Besides guarding the map,
// this orders operations on one server: an operation that saw lease n in
// step (1) cannot overwrite a value stored by a later operation under a newer
// lease, because that later operation ran either wholly before (and then step
// (1) sees the newer lease, not n) or wholly after.
type store struct {
	mu     sync.Mutex
	leases leases          // guarded by mu; nil until the Owner is started
	items  map[string]item // guarded by mu
}

func newStore() *store { return &store{items: map[string]item{}} }

// setLeases installs the lease checker once the Owner exists.
func (s *store) setLeases(l leases) {
	s.mu.Lock()
	s.leases = l
	s.mu.Unlock()
}

// put stores value under key: PRS Figure 4's Put.
func (s *store) put(key string, value []byte) error {
	k := keyspace.KeyOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	// (1) Is this the right server?
	n, ok := s.checkLeaseNowLocked(k)
	if !ok {
		return errNotOwner
	}
	// (2) Validate stored state: nothing to do, the value is replaced.
	// (3) Operate, and store the lease number with the value.
	s.items[key] = item{key: k, value: value, lease: n}
	// (4) Did the lease cover the whole operation? If not, the value stays
	// stored under n, and step (2) of a later operation finds it stale.
	if !s.leases.CheckLeaseContinuous(k, n) {
		return errLeaseLost
	}
	return nil // (5) expose the result
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
	// (2) Validate stored state: a value stored under any other lease may
	// predate another server's ownership of the key, so it is stale.
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

// sweep drops every value whose lease is no longer held, to free memory
// after ranges move. It runs from the Owner's OnChange upcall, which may lag;
// correctness never rests on it (step (2) catches stale values), and it only
// drops values stale by that same rule, so a late upcall cannot drop a value
// stored under a newer lease.
func (s *store) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases == nil {
		return
	}
	for key, it := range s.items {
		if !s.leases.CheckLeaseContinuous(it.key, it.lease) {
			delete(s.items, key)
		}
	}
}

// len returns the number of stored values, stale or not.
func (s *store) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}
