package presence

import (
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// leases is what the store needs of the Owner library (tests use a fake).
type leases interface {
	CheckLeaseNow(key keyspace.Key) (owner.LeaseNum, bool)
	CheckLeaseContinuous(key keyspace.Key, n owner.LeaseNum) bool
}

var _ leases = (*owner.Owner)(nil)

var (
	errNotOwner  = errors.New("not the owner")
	errLeaseLost = errors.New("lease lost")
)

// Device is one device's status in an Answer: its last heartbeat's status
// and counter, and how long ago the server received it.
type Device struct {
	Device string `json:"device"`
	Status string `json:"status"`
	Seq    uint64 `json:"seq"`
	AgeMS  int64  `json:"age_ms"`
}

// Answer answers a query: the user's devices online (heard from within the
// TTL), by name, and the Owner and lease the answer was given under.
type Answer struct {
	User    string   `json:"user"`
	Owner   string   `json:"owner"`
	Devices []Device `json:"devices"`
	Epoch   uint64   `json:"epoch"`
	LGN     uint64   `json:"lgn"`
}

type device struct {
	status string
	seq    uint64
	at     time.Time
}

// user is one user's soft state, stored under one lease (C§3.2).
type user struct {
	key     keyspace.Key
	lease   owner.LeaseNum
	devices map[string]device
}

// shards spread the users over this many mutexes, so heartbeats of
// different users run in parallel.
const shards = 64

// store is the Owner's soft state: the users whose keys it holds.
type store struct {
	leases leases
	ttl    time.Duration
	now    func() time.Time
	shard  [shards]struct {
		mu    sync.Mutex
		users map[string]*user // guarded by mu
	}
}

func newStore(l leases, ttl time.Duration) *store {
	s := &store{leases: l, ttl: ttl, now: time.Now}
	for i := range s.shard {
		s.shard[i].users = map[string]*user{}
	}
	return s
}

// begin runs steps (1) and (2) with the user's shard locked: the lease the
// user's key is held under, and the user's state if it was stored under
// that same lease. State stored under any other lease is dropped.
func (s *store) begin(name string) (k keyspace.Key, n owner.LeaseNum, u *user, unlock func(), err error) {
	k = keyspace.KeyOf(name)
	sh := &s.shard[k%shards]
	sh.mu.Lock()
	// Duty: check before acting — (1) is this the right server?
	n, ok := s.leases.CheckLeaseNow(k)
	if !ok {
		sh.mu.Unlock()
		return k, n, nil, nil, errNotOwner
	}
	// Duty: keep the LeaseNum with the state, and treat state stored under
	// any other as lost — (2) validate stored state.
	if u = sh.users[name]; u != nil && u.lease != n {
		delete(sh.users, name)
		u = nil
	}
	if u == nil {
		u = &user{key: k, lease: n, devices: map[string]device{}}
		sh.users[name] = u
	}
	return k, n, u, sh.mu.Unlock, nil
}

// heartbeat stores device's status, unless the stored one has a higher
// seq (an older heartbeat, retried or reordered).
func (s *store) heartbeat(name, dev, status string, seq uint64) error {
	k, n, u, unlock, err := s.begin(name)
	if err != nil {
		return err
	}
	defer unlock()
	// (3) Operate, under lease n (u.lease).
	if d, ok := u.devices[dev]; !ok || seq >= d.seq {
		u.devices[dev] = device{status: status, seq: seq, at: s.now()}
	}
	// Duty: check after acting, before the answer leaves — (4) did the
	// lease cover the whole operation? If not, the status stays stored
	// under n, and step (2) finds it stale.
	if !s.leases.CheckLeaseContinuous(k, n) {
		return errLeaseLost
	}
	return nil // (5)
}

// query answers which of name's devices are online.
func (s *store) query(name string) (Answer, error) {
	k, n, u, unlock, err := s.begin(name)
	if err != nil {
		return Answer{}, err
	}
	defer unlock()
	// (3) Operate: read the devices heard from within the TTL.
	now := s.now()
	a := Answer{User: name, Devices: []Device{}, Epoch: n.Epoch, LGN: uint64(n.LGN)}
	for name, d := range u.devices {
		if age := now.Sub(d.at); age <= s.ttl {
			a.Devices = append(a.Devices, Device{Device: name, Status: d.status, Seq: d.seq, AgeMS: age.Milliseconds()})
		} else {
			delete(u.devices, name)
		}
	}
	sort.Slice(a.Devices, func(i, j int) bool { return a.Devices[i].Device < a.Devices[j].Device })
	if !s.leases.CheckLeaseContinuous(k, n) { // (4), the same duty
		return Answer{}, errLeaseLost
	}
	return a, nil // (5)
}

// sweep frees the memory of users whose lease ended or whose devices all
// went quiet past the TTL. It runs from the OnChange upcall and a ticker.
// Duty: never rely on OnChange for correctness — step (2) catches stale
// state whether or not the sweep ran.
func (s *store) sweep() {
	now := s.now()
	for i := range s.shard {
		sh := &s.shard[i]
		sh.mu.Lock()
		for name, u := range sh.users {
			for dn, d := range u.devices {
				if now.Sub(d.at) > s.ttl {
					delete(u.devices, dn)
				}
			}
			if len(u.devices) == 0 || !s.leases.CheckLeaseContinuous(u.key, u.lease) {
				delete(sh.users, name)
			}
		}
		sh.mu.Unlock()
	}
}

// counts returns the users and devices stored.
func (s *store) counts() (users, devices int) {
	for i := range s.shard {
		sh := &s.shard[i]
		sh.mu.Lock()
		users += len(sh.users)
		for _, u := range sh.users {
			devices += len(u.devices)
		}
		sh.mu.Unlock()
	}
	return users, devices
}
