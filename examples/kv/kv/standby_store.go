package kv

import (
	"errors"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// The store's part of standby Owners (docs/standbys.md): as holder it
// tells each write which standby must store it before the client is
// answered; as standby it keeps a copy of each range it stands by for, fed
// by its holder's writes and fill, and serves from it once promoted.

// standbys is what the store needs of the Owner library's standby API.
// *owner.Owner provides it; tests use a fake.
type standbys interface {
	StandbyOf(key keyspace.Key) (owner.Pairing, bool)
	HolderOf(key keyspace.Key) (owner.Pairing, bool)
	CheckStandbyWrite(key keyspace.Key, holder string, lease owner.LeaseNum, sgn protocol.SGN) error
}

var _ standbys = (*owner.Owner)(nil)

var (
	// errStandbyUnknown: the key's lease is newer than the standby roles
	// this server knows; they arrive in the same answer, a moment later.
	errStandbyUnknown = errors.New("standby: the key's standby is not known yet; retry")
	// errStandby: the standby did not store the write in time (it is
	// unreachable, or refused it): the write was not acknowledged.
	errStandby = errors.New("standby: the key's standby did not store the write; retry")
)

// copyItem is a value this server keeps as standby: the holder's write,
// under the holder's lease, its order among the holder's writes, and the
// SGN it was sent under.
type copyItem struct {
	key   keyspace.Key
	value []byte
	lease owner.LeaseNum // the holder's
	seq   uint64         // the holder's write counter
	sgn   protocol.SGN
}

// newer reports whether a write under lease l, numbered seq, comes after
// the copy c: a later lease's writes replace an earlier one's, and within
// one lease (one holder) the later write wins.
func (c copyItem) olderThan(l owner.LeaseNum, seq uint64) bool {
	switch {
	case c.lease.Epoch != l.Epoch:
		return c.lease.Epoch < l.Epoch
	case c.lease.LGN != l.LGN:
		return c.lease.LGN < l.LGN
	}
	return c.seq < seq
}

// write is a put stored by the holder and not yet acknowledged: the
// standby it must reach first, if any.
type write struct {
	key     string
	k       keyspace.Key
	value   []byte
	seq     uint64
	lease   owner.LeaseNum
	standby owner.Pairing // Peer empty: none
}

// standbyOfLocked returns the standby a write on k under lease n must
// reach. No role: the namespace has no standbys. A role for another lease:
// the roles lag, and the write waits.
func (s *store) standbyOfLocked(k keyspace.Key, n owner.LeaseNum) (owner.Pairing, error) {
	if s.roles == nil {
		return owner.Pairing{Lease: n}, nil
	}
	p, ok := s.roles.StandbyOf(k)
	switch {
	case !ok:
		return owner.Pairing{}, errLeaseLost
	case p.Lease != n:
		return owner.Pairing{}, errStandbyUnknown
	}
	return p, nil
}

// replica is one replicated write or fill batch as the standby receives
// it.
type replica struct {
	from    string
	r       keyspace.Range
	lease   owner.LeaseNum
	sgn     protocol.SGN
	fill    bool // part of a fill; first: its first batch
	first   bool
	entries []replicaEntry
}

// replicate stores a replicated write or fill batch as standby, if the
// Owner library's fence accepts every key of it (a batch without keys is
// checked on its range's first key). The first batch of a fill drops what
// this server kept under any other SGN of the keys the fence now gives to
// the fill's pairing: the fill replaces them. A copy kept in the range for
// another lease (a piece between two of the filling lease's, granted to
// another holder this server stands by for) stays: the fill is not its
// state, and that lease's standby may be promoted onto it.
func (s *store) replicate(m replica) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.roles == nil {
		return &owner.StandbyRefusal{Key: m.r.Start, Holder: m.from, Lease: m.lease, SGN: m.sgn,
			Reason: "this server runs without standbys"}
	}
	if len(m.entries) == 0 {
		if err := s.roles.CheckStandbyWrite(m.r.Start, m.from, m.lease, m.sgn); err != nil {
			return err
		}
	}
	for _, e := range m.entries {
		if err := s.roles.CheckStandbyWrite(keyspace.KeyOf(e.Key), m.from, m.lease, m.sgn); err != nil {
			return err
		}
	}
	if m.fill && m.first {
		for key, c := range s.copies {
			if m.r.Contains(c.key) && c.sgn != m.sgn &&
				s.roles.CheckStandbyWrite(c.key, m.from, m.lease, m.sgn) == nil {
				delete(s.copies, key)
			}
		}
	}
	for _, e := range m.entries {
		if c, ok := s.copies[e.Key]; ok && !c.olderThan(m.lease, e.Seq) {
			continue
		}
		s.copies[e.Key] = copyItem{key: keyspace.KeyOf(e.Key), value: e.Value, lease: m.lease, seq: e.Seq, sgn: m.sgn}
	}
	return nil
}

// fillCopy returns the values of the range of sb held under sb.Lease, to
// fill the standby with, with their write numbers, and the pieces of the
// lease held now, which the fill covers and names (the standby reports
// those pieces in sync, and only those are promoted: a piece this server
// dropped before the copy was not copied). It first settles the
// range's state: a lease's first pairing comes with its grant, and the
// values the grant carries (handed over, or the copy a promoted grant
// takes up) may still wait for the grant's upcall; copied without them,
// the standby would be recorded in sync with a partial copy. While the
// grant is not known to carry state or not, it returns errArriving.
func (s *store) fillCopy(sb owner.Pairing) ([]replicaEntry, []keyspace.Range, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.settleRangeLocked(sb.Range, sb.Lease); err != nil {
		return nil, nil, err
	}
	var pieces []keyspace.Range
	for _, l := range s.leases.Held() {
		if q, ok := l.Range.Intersect(sb.Range); ok && l.Num == sb.Lease {
			pieces = append(pieces, q)
		}
	}
	var out []replicaEntry
	for key, it := range s.items {
		if sb.Range.Contains(it.key) && it.lease == sb.Lease {
			out = append(out, replicaEntry{Key: key, Value: it.value, Seq: it.seq})
		}
	}
	return out, pieces, nil
}

// settleRangeLocked settles, as an operation's step (2) does for its key,
// every value handed over or kept as standby in r whose key is held under
// lease n.
func (s *store) settleRangeLocked(r keyspace.Range, n owner.LeaseNum) error {
	var keys []string
	for key, p := range s.pending {
		if r.Contains(p.key) {
			keys = append(keys, key)
		}
	}
	for key, c := range s.copies {
		if r.Contains(c.key) {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		k := keyspace.KeyOf(key)
		if cur, ok := s.checkLeaseNowLocked(k); !ok || cur != n {
			continue // not the fill's lease's
		}
		if err := s.settleLocked(key, k, n); err != nil {
			return err
		}
	}
	return nil
}

// takeUpCopiesLocked makes the copy kept as standby of lease l's range the
// range's state under l, for a promoted grant; values handed over for the
// range are not its state and are dropped.
func (s *store) takeUpCopiesLocked(l owner.Lease) {
	for key, c := range s.copies {
		if !l.Range.Contains(c.key) {
			continue
		}
		delete(s.copies, key)
		if cur, ok := s.items[key]; ok && cur.lease == l.Num {
			continue // written under l already
		}
		s.seq++
		s.items[key] = item{key: c.key, value: c.value, lease: l.Num, seq: s.seq}
		s.promoted++
	}
	for key, p := range s.pending {
		if l.Range.Contains(p.key) {
			delete(s.pending, key)
			s.discarded++
		}
	}
}

// dropCopiesLocked drops the copy of r: this server holds r under a grant
// that was not a promotion, whose state is elsewhere.
func (s *store) dropCopiesLocked(r keyspace.Range) {
	for key, c := range s.copies {
		if r.Contains(c.key) {
			delete(s.copies, key)
		}
	}
}

// sweepCopiesLocked drops the copies of keys this server neither stands
// by for nor holds: the role went elsewhere. A key held under a grant not
// yet reported keeps its copy until the grant says whether it was a
// promotion (settleLocked, changed).
func (s *store) sweepCopiesLocked() {
	if len(s.copies) == 0 || s.roles == nil {
		return
	}
	for key, c := range s.copies {
		if _, ok := s.roles.HolderOf(c.key); ok {
			continue
		}
		if _, ok := s.checkLeaseNowLocked(c.key); ok {
			continue
		}
		delete(s.copies, key)
	}
}

// standbyChanged is the Owner's OnStandbyChange upcall, for the store: it
// drops the copies no role needs any more.
func (s *store) standbyChanged() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepCopiesLocked()
}

// copyCounts returns how many values this server keeps as standby, and
// how many it took up when promoted.
func (s *store) copyCounts() (copies, promoted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.copies), s.promoted
}

// promoted reports whether l is a grant to this server as the range's
// in-sync standby: it carries the copy kept as standby.
func promoted(l owner.Lease) bool { return l.Promoted }

// settleCopyLocked decides the fate of the copy of key k kept as standby,
// before an operation on k held now under lease n: taken up with its range
// if n is a promoted grant, dropped if the grant was reported without
// (its state is elsewhere). Until one of the two is known the operation
// waits (errArriving), as for values handed over.
func (s *store) settleCopyLocked(k keyspace.Key, n owner.LeaseNum) error {
	for _, l := range s.leases.Held() {
		if l.Range.Contains(k) && l.Num == n && (promoted(l) || l.Migrated) {
			s.takeUpLocked(l)
			return nil
		}
	}
	if s.upheld[n].Contains(k) {
		s.dropCopiesLocked(keyspace.Range{Start: k, End: k + 1})
		return nil
	}
	return errArriving
}
