package wire

import (
	"fmt"
	"sync/atomic"

	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// Names once on a Lookup's sync stream, as on a lease stream (names.go):
// requests leave out the namespace, responses the namespace and the
// timings, once the other end has them. And the entries of deltas and
// snapshots name each Owner and its address in full only the first time
// the stream carries them: the entry defines a number for the pair
// (owner_ref), and later entries on the stream give the number alone. A
// push after an Owner's crash grants its ranges to the Owners that remain,
// whose names the stream has carried before, so each change loses the
// 25–30 bytes of an ID and an address.
//
// The dictionary is the stream's: both ends start it empty with the stream
// and add to it in the order the messages travel, so an entry's number
// means on arrival what it meant when sent. A number the Lookup has not
// seen defined cannot come from a Manager that follows this rule; the
// Lookup ends the stream on it, and its next stream starts afresh with a
// sync.

// MaxOwnerRefs bounds the dictionary of one sync stream: past it, entries
// name their owners in full.
const MaxOwnerRefs = 1 << 16

// MaxRefItems bounds the updates whose owners Send names by number: the
// update is copied for each stream, which for a snapshot of a large table
// sent to thousands of Lookups at start-up would cost more than the bytes
// it saves. Larger updates go as they are, shared, with full names.
const MaxRefItems = 1024

type ownerAddr struct{ owner, addr string }

// LookupNames is the Lookup's end of one sync stream. Send and Recv may run
// in different goroutines; each must be called from one goroutine at a
// time.
type LookupNames struct {
	accepted atomic.Bool
	sent     bool
	said     bool // compact_changes sent on the stream
	ns       string
	// Recv's: the last response's names and the dictionary.
	heard          bool
	rns            string
	rsync, rtimout int64
	rdrift         float64
	refs           []ownerAddr // refs[n-1] is owner_ref n
}

// Send returns the request to send for m: m with names_once set (and
// compact_changes, on the stream's first request), or a copy without its
// namespace. m keeps its namespace.
func (c *LookupNames) Send(m *leaseholdv1.SyncRequest) *leaseholdv1.SyncRequest {
	m.NamesOnce = true
	if !c.said {
		// Said once per stream: the Manager's end remembers it.
		m.CompactChanges, c.said = true, true
	}
	if !c.sent || !c.accepted.Load() || m.GetNamespace() != c.ns || c.ns == "" {
		c.sent, c.ns = true, m.GetNamespace()
		return m
	}
	return &leaseholdv1.SyncRequest{Id: m.Id, Epoch: m.Epoch, Lsn: m.Lsn, NamesOnce: true, CompactChanges: m.CompactChanges,
		MaxDrift: m.MaxDrift}
}

// Recv puts back into m, received on the stream, the names and owners it
// leaves out. It returns an error for an owner_ref the stream has not
// defined, or defined out of order; m is then malformed.
func (c *LookupNames) Recv(m *leaseholdv1.SyncResponse) error {
	if m.GetNamesOnce() {
		c.accepted.Store(true)
	}
	if m.GetNamespace() != "" {
		c.heard, c.rns, c.rsync, c.rtimout = true, m.GetNamespace(), m.GetSyncNanos(), m.GetSyncTimeoutNanos()
		c.rdrift = m.GetMaxDrift()
	} else if c.heard {
		m.Namespace, m.SyncNanos, m.SyncTimeoutNanos, m.MaxDrift = c.rns, c.rsync, c.rtimout, c.rdrift
	}
	u := m.GetUpdate()
	if cc := u.GetCompact(); cc.GetStreamRefs() {
		if err := c.compact(cc); err != nil {
			return fmt.Errorf("%w: SyncResponse.update.compact: %v", ErrInvalid, err)
		}
	}
	for i, ch := range u.GetChanges() {
		if err := c.entry(ch.GetEntry()); err != nil {
			return fmt.Errorf("%w: SyncResponse.update.changes[%d]: %v", ErrInvalid, i, err)
		}
	}
	for i, s := range u.GetSegments() {
		if err := c.entry(s.GetEntry()); err != nil {
			return fmt.Errorf("%w: SyncResponse.update.segments[%d]: %v", ErrInvalid, i, err)
		}
	}
	return nil
}

// compact takes in the owner_refs a compact delta's names define, and
// rewrites the delta to name its owners itself: names lists, once each,
// the owners its owners column uses, and that column numbers them in
// names.
func (c *LookupNames) compact(cc *leaseholdv1.CompactChanges) error {
	for i, nm := range cc.GetNames() {
		if nm.GetOwner() == "" || nm.GetOwnerRef() == 0 {
			return fmt.Errorf("names[%d]: a name on the stream needs an owner and an owner_ref", i)
		}
		if err := c.entry(nm); err != nil {
			return fmt.Errorf("names[%d]: %v", i, err)
		}
	}
	var names []*leaseholdv1.Entry
	local := map[uint32]uint32{}
	for i, n := range cc.GetOwners() {
		if n == 0 {
			continue
		}
		if int64(n) > int64(len(c.refs)) {
			return fmt.Errorf("owners[%d]: owner_ref %d not defined on this stream (%d defined)", i, n, len(c.refs))
		}
		l, ok := local[n]
		if !ok {
			names = append(names, &leaseholdv1.Entry{Owner: c.refs[n-1].owner, Addr: c.refs[n-1].addr})
			l = uint32(len(names))
			local[n] = l
		}
		cc.Owners[i] = l
	}
	cc.Names, cc.StreamRefs = names, false
	return nil
}

func (c *LookupNames) entry(e *leaseholdv1.Entry) error {
	n := e.GetOwnerRef()
	switch {
	case n == 0:
		return nil
	case e.GetOwner() != "":
		switch {
		case int(n) == len(c.refs)+1 && n <= MaxOwnerRefs:
			c.refs = append(c.refs, ownerAddr{e.GetOwner(), e.GetAddr()})
		case int(n) <= len(c.refs) && c.refs[n-1] == (ownerAddr{e.GetOwner(), e.GetAddr()}):
		default:
			return fmt.Errorf("owner_ref %d defined out of order (%d defined)", n, len(c.refs))
		}
	case int(n) <= len(c.refs):
		e.Owner, e.Addr = c.refs[n-1].owner, c.refs[n-1].addr
	default:
		return fmt.Errorf("owner_ref %d not defined on this stream (%d defined)", n, len(c.refs))
	}
	e.OwnerRef = 0
	return nil
}

// ManagerSyncNames is the Manager's end of one sync stream. Send and Recv
// may run in different goroutines; each must be called from one goroutine
// at a time.
type ManagerSyncNames struct {
	once      atomic.Bool
	compactOK atomic.Bool
	// Recv's
	heard bool
	ns    string
	// Send's
	sent           bool
	rns            string
	rsync, rtimout int64
	rdrift         float64
	refs           map[ownerAddr]uint32
}

// Accepts reports whether the stream's requests say names_once: the Lookup
// reads owner_ref, and merged deltas (leasetable.Merge).
func (c *ManagerSyncNames) Accepts() bool { return c.once.Load() }

// AcceptsCompact reports whether a request of the stream said names_once
// and compact_changes: the Lookup reads Update.compact. A Lookup says it
// once per stream, in its first request.
func (c *ManagerSyncNames) AcceptsCompact() bool { return c.compactOK.Load() }

// Recv puts the namespace the Lookup left out back into m.
func (c *ManagerSyncNames) Recv(m *leaseholdv1.SyncRequest) {
	if m.GetNamesOnce() {
		c.once.Store(true)
		if m.GetCompactChanges() {
			c.compactOK.Store(true)
		}
	}
	if m.GetNamespace() != "" {
		c.heard, c.ns = true, m.GetNamespace()
		return
	}
	if c.heard && m.GetNamesOnce() {
		m.Namespace = c.ns
	}
}

// Send returns the response to send for m on a stream whose requests say
// names_once: m without the names the Lookup has, and with its update's
// owners named by number. m's own fields may be changed, but its update
// is shared with other streams: it is copied, never changed. On other
// streams it returns m as it is.
func (c *ManagerSyncNames) Send(m *leaseholdv1.SyncResponse) *leaseholdv1.SyncResponse {
	if !c.once.Load() {
		return m
	}
	m.NamesOnce = true
	if !c.sent || m.GetNamespace() != c.rns || m.GetSyncNanos() != c.rsync || m.GetSyncTimeoutNanos() != c.rtimout ||
		m.GetMaxDrift() != c.rdrift || c.rns == "" {
		c.sent, c.rns, c.rsync, c.rtimout, c.rdrift = true, m.GetNamespace(), m.GetSyncNanos(), m.GetSyncTimeoutNanos(), m.GetMaxDrift()
	} else {
		m.Namespace, m.SyncNanos, m.SyncTimeoutNanos, m.MaxDrift = "", 0, 0, 0
	}
	u := m.GetUpdate()
	if cc := u.GetCompact(); cc != nil {
		if n := len(cc.GetKinds()); n > 0 && n <= MaxRefItems {
			if out := c.compact(u, cc); out != nil {
				m.Update = out
			}
		}
		return m
	}
	if n := len(u.GetChanges()) + len(u.GetSegments()); n == 0 || n > MaxRefItems {
		// Nothing to name, or a snapshot or a burst's delta: shared by
		// every stream as it is rather than copied for each.
		return m
	}
	if c.refs == nil {
		c.refs = map[ownerAddr]uint32{}
	}
	out := &leaseholdv1.Update{From: u.From, To: u.To, Snapshot: u.Snapshot, Merged: u.Merged}
	if n := len(u.Changes); n > 0 {
		out.Changes = make([]*leaseholdv1.Change, n)
		changes := make([]leaseholdv1.Change, n)
		entries := make([]leaseholdv1.Entry, n)
		for i, ch := range u.Changes {
			c.ref(ch.GetEntry(), &entries[i])
			changes[i].Lsn, changes[i].Range, changes[i].Entry, changes[i].ViaFree = ch.Lsn, ch.Range, &entries[i], ch.ViaFree
			out.Changes[i] = &changes[i]
		}
	}
	if n := len(u.Segments); n > 0 {
		out.Segments = make([]*leaseholdv1.Segment, n)
		segs := make([]leaseholdv1.Segment, n)
		entries := make([]leaseholdv1.Entry, n)
		for i, s := range u.Segments {
			c.ref(s.GetEntry(), &entries[i])
			segs[i].Range, segs[i].Entry = s.Range, &entries[i]
			out.Segments[i] = &segs[i]
		}
	}
	m.Update = out
	return m
}

// compact returns a copy of the compact delta u whose owners are the
// stream's owner_refs (stream_refs), names defining those the stream has
// not carried yet; the columns other than owners are shared with u. It
// returns nil, and u is sent as it is, when the stream's dictionary is
// full.
func (c *ManagerSyncNames) compact(u *leaseholdv1.Update, cc *leaseholdv1.CompactChanges) *leaseholdv1.Update {
	if c.refs == nil {
		c.refs = map[ownerAddr]uint32{}
	}
	missing := 0
	for _, nm := range cc.GetNames() {
		if _, ok := c.refs[ownerAddr{nm.GetOwner(), nm.GetAddr()}]; !ok {
			missing++
		}
	}
	if len(c.refs)+missing > MaxOwnerRefs {
		return nil
	}
	refs := make([]uint32, len(cc.GetNames()))
	var defs []*leaseholdv1.Entry
	for i, nm := range cc.GetNames() {
		k := ownerAddr{nm.GetOwner(), nm.GetAddr()}
		n, ok := c.refs[k]
		if !ok {
			n = uint32(len(c.refs) + 1)
			c.refs[k] = n
			defs = append(defs, &leaseholdv1.Entry{Owner: k.owner, Addr: k.addr, OwnerRef: n})
		}
		refs[i] = n
	}
	owners := make([]uint32, len(cc.GetOwners()))
	for i, o := range cc.GetOwners() {
		if o != 0 && int64(o) <= int64(len(refs)) {
			owners[i] = refs[o-1]
		}
	}
	out := &leaseholdv1.CompactChanges{
		Kinds: cc.Kinds, Starts: cc.Starts, Ends: cc.Ends, Owners: owners, Lgns: cc.Lgns,
		LsnSkips: cc.LsnSkips, MigratedFrom: cc.MigratedFrom, Names: defs, StreamRefs: true,
	}
	return &leaseholdv1.Update{From: u.From, To: u.To, Snapshot: u.Snapshot, Merged: u.Merged, Compact: out}
}

// ref writes e into out with its owner named by number.
func (c *ManagerSyncNames) ref(e *leaseholdv1.Entry, out *leaseholdv1.Entry) {
	out.Owner, out.Addr, out.Lgn, out.Migrated, out.MigratedFrom = e.GetOwner(), e.GetAddr(), e.GetLgn(), e.GetMigrated(), e.GetMigratedFrom()
	if out.Owner == "" {
		return
	}
	k := ownerAddr{out.Owner, out.Addr}
	if n, ok := c.refs[k]; ok {
		out.Owner, out.Addr, out.OwnerRef = "", "", n
		return
	}
	if len(c.refs) < MaxOwnerRefs {
		n := uint32(len(c.refs) + 1)
		c.refs[k] = n
		out.OwnerRef = n
	}
}
