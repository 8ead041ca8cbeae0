package wire

import (
	"sync/atomic"

	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// Names once per stream.
//
// An Owner's lease stream carries one Owner run from its first message to
// its last: every request names the same namespace, owner and address, and
// every response the same namespace, owner, incarnation and timings. After
// the first message each way that carries them, these names are left out,
// and the receiving end puts them back before anything reads the message:
// a pure encoding, per stream, which the protocol never sees. A steady renewal and its answer shrink by about 70 bytes.
//
// Both ends opt in, so an Owner and a Manager of different versions keep
// the full form: the Owner says names_once in every request, and leaves
// its names out only once a response on the stream has said names_once; the
// Manager says names_once in its responses on a stream whose requests do,
// and leaves its own names out only after that stream's first response.
// A gRPC stream delivers its messages in order and entire, or ends: the
// last message with names that one end sent is the last the other end
// received, so the names put back are the ones left out. Each end puts back the names of
// the last message that carried them, and the other leaves them out only
// when they equal the last it sent: a message whose names differ (none
// should, on one stream) simply carries them. A new stream (a reconnection, a
// relay, another replica) starts again with full names: the state is the
// stream's, never the session's. A relaying replica passes messages both
// ways unchanged over one stream of its own per Owner stream, so the
// leader's end sees the same sequence of messages.

// OwnerNames is the Owner's end of one lease stream: Send leaves names out
// of requests once the Manager has said names_once on the stream, and Recv
// puts the Manager's names back into responses. Send and Recv may run in
// different goroutines; each must be called from one goroutine at a time.
type OwnerNames struct {
	accepted atomic.Bool // a response on this stream said names_once

	// Send's: the names of the last request sent with them.
	sent         bool
	ns, id, addr string
	// Recv's: the names of the last response received with them.
	heard         bool
	rns, rid      string
	rinc          uint64
	rlease, renew int64
}

// Send returns the request to send on the stream for m: m itself with
// names_once set, or a copy of it without its names. m is not changed
// beyond names_once, so it can be sent again, in full, on another stream.
func (c *OwnerNames) Send(m *leaseholdv1.LeaseRequest) *leaseholdv1.LeaseRequest {
	m.NamesOnce = true
	if !c.sent || !c.accepted.Load() || m.GetNamespace() != c.ns || m.GetOwner() != c.id || m.GetAddr() != c.addr || c.id == "" {
		c.sent, c.ns, c.id, c.addr = true, m.GetNamespace(), m.GetOwner(), m.GetAddr()
		return m
	}
	return &leaseholdv1.LeaseRequest{
		Incarnation: m.Incarnation, Seq: m.Seq, AckEpoch: m.AckEpoch, AckSeq: m.AckSeq,
		Held: m.Held, Leaving: m.Leaving, Draining: m.Draining, Handed: m.Handed,
		Capacity: m.Capacity, Load: m.Load, HotKeys: m.HotKeys, WindowNanos: m.WindowNanos,
		HeldAsAcked: m.HeldAsAcked, NamesOnce: true, Zone: m.Zone, InSync: m.InSync,
	}
}

// Recv puts the names the Manager left out back into m, a response received
// on the stream, from the last response that carried them. A response that
// names its owner is taken as it is.
func (c *OwnerNames) Recv(m *leaseholdv1.LeaseResponse) {
	if m.GetNamesOnce() {
		c.accepted.Store(true)
	}
	if m.GetOwner() != "" {
		c.heard = true
		c.rns, c.rid, c.rinc, c.rlease, c.renew = m.GetNamespace(), m.GetOwner(), m.GetIncarnation(), m.GetOwnerLeaseNanos(), m.GetRenewNanos()
		return
	}
	if !c.heard {
		return // nothing to put back: it fails validation as it is
	}
	m.Namespace, m.Owner, m.Incarnation = c.rns, c.rid, c.rinc
	m.OwnerLeaseNanos, m.RenewNanos = c.rlease, c.renew
}

// ManagerNames is the Manager's end of one lease stream: Recv puts an
// Owner's names back into its requests, and Send leaves the Manager's out
// of responses after the first. Send and Recv may run in different
// goroutines; each must be called from one goroutine at a time.
type ManagerNames struct {
	once atomic.Bool // the stream's requests say names_once

	// Recv's: the names of the last request received with them.
	heard        bool
	ns, id, addr string
	// Send's: the names of the last response sent with them.
	sent          bool
	rns, rid      string
	rinc          uint64
	rlease, renew int64
}

// Recv puts the names the Owner left out back into m, a request received
// on the stream, from the last request that carried them. A request that
// names its owner is taken as it is.
func (c *ManagerNames) Recv(m *leaseholdv1.LeaseRequest) {
	if m.GetNamesOnce() {
		c.once.Store(true)
	}
	if m.GetOwner() != "" {
		c.heard, c.ns, c.id, c.addr = true, m.GetNamespace(), m.GetOwner(), m.GetAddr()
		return
	}
	if !c.heard || !m.GetNamesOnce() {
		return // nothing to put back: it fails validation as it is
	}
	m.Namespace, m.Owner, m.Addr = c.ns, c.id, c.addr
}

// Send says names_once on a stream whose requests do, and leaves the names
// out of m after the stream's first response when they are the same. It
// changes m, which is this stream's alone.
func (c *ManagerNames) Send(m *leaseholdv1.LeaseResponse) {
	if !c.once.Load() {
		return
	}
	m.NamesOnce = true
	if !c.sent || m.GetNamespace() != c.rns || m.GetOwner() != c.rid || m.GetIncarnation() != c.rinc ||
		m.GetOwnerLeaseNanos() != c.rlease || m.GetRenewNanos() != c.renew || c.rid == "" {
		c.sent = true
		c.rns, c.rid, c.rinc, c.rlease, c.renew = m.GetNamespace(), m.GetOwner(), m.GetIncarnation(), m.GetOwnerLeaseNanos(), m.GetRenewNanos()
		return
	}
	m.Namespace, m.Owner, m.Incarnation, m.OwnerLeaseNanos, m.RenewNanos = "", "", 0, 0, 0
}
