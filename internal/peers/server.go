package peers

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/leasehold/leasehold/internal/client"
)

// The server options of a Manager replica's gRPC server, which its peers'
// Raft streams and its clients' streams reach alike. They live here, with
// the transport, rather than in internal/client, which is the clients' side
// only: the server's half of each setting is derived from the clients'
// (client.KeepaliveTime, client.StreamWindow), so the two are defined once
// and cannot drift apart.

// WindowServerOptions are the server options that set client.StreamWindow
// and client.ConnWindow (see there): the server side of the same windows.
func WindowServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(client.StreamWindow), grpc.StaticConnWindowSize(client.ConnWindow)}
}

// BufferServerOptions are the server options that size a connection's
// buffers for a server with tens of thousands of mostly idle connections.
// gRPC's defaults give every connection a 32-KB read buffer and a 32-KB
// write buffer for its whole life: 64 KB of a client's cost at the
// Manager whether it says anything or not. The write buffer is taken from
// a pool shared by every connection when a batch of frames is written and
// returned when it is flushed (SharedWriteBuffer), so an idle connection
// holds none; it costs a pool's get and put per flush. The read buffer is
// ReadBuffer: what a Manager reads are small requests, renewals and
// polls of a few dozen bytes, and a frame at least as large as the buffer
// (a Raft message's part) is read straight into its own memory by the
// buffered reader, so a small buffer costs no extra reads for it.
func BufferServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.SharedWriteBuffer(true), grpc.ReadBufferSize(ReadBuffer)}
}

// ReadBuffer is the size of a server connection's read buffer
// (BufferServerOptions).
const ReadBuffer = 4 << 10

// KeepaliveServerOptions are the server options a Manager replica needs
// for keepalive. It lets its clients ping every client.KeepaliveTime, with
// or without a stream open (gRPC's default, one ping in 5 minutes, would end
// their connections with GOAWAY "too_many_pings"), and pings them itself
// (KeepaliveServerParameters).
func KeepaliveServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: client.KeepaliveTime / 2, PermitWithoutStream: true}),
		grpc.KeepaliveParams(KeepaliveServerParameters()),
	}
}

// The server's keepalive: a Manager replica pings a connection on which it
// has read nothing for KeepaliveServerTime and closes it, ending its
// streams, when no answer comes within KeepaliveServerTimeout. So a client
// connection that went dead without a reset (its host died, a proxy
// stopped forwarding, a cable was cut) ends within KeepaliveServerTime +
// KeepaliveServerTimeout (25 s) of the last thing heard on it, not gRPC's
// default 2 hours; an Owner's session bound to a stream on it stops
// waiting for it sooner, once it has been quiet for Timing.OwnerQuiet
// (docs/protocol.md).
//
// KeepaliveServerTime is twice client.KeepaliveTime, so the server pings
// no live client that dials with client.Dial: such a client pings itself
// whenever it has read nothing for client.KeepaliveTime, and the server
// hears from it (a ping, an acknowledgement, a request) at least every
// client.KeepaliveTime and a round trip.
// The server's pings fall on connections whose clients are gone, stuck,
// or do not ping (other gRPC clients; a Lookup that only reads pushes),
// one ping each KeepaliveServerTime.
const (
	KeepaliveServerTime    = 2 * client.KeepaliveTime
	KeepaliveServerTimeout = client.KeepaliveTimeout
)

// KeepaliveServerParameters are the server's keepalive parameters (see
// KeepaliveServerTime). gRPC keeps one set per server: a caller that sets
// other fields (MaxConnectionIdle) starts from these.
func KeepaliveServerParameters() keepalive.ServerParameters {
	return keepalive.ServerParameters{Time: KeepaliveServerTime, Timeout: KeepaliveServerTimeout}
}
