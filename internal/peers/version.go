package peers

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The peer protocol version: what a Raft.Send stream carries and how
// (a raftpb.Message in parts of PartBytes, joined by the receiver). A
// replica speaks every version from MinProtocol to Protocol; it names its
// own (Protocol) in the metadata of each stream it opens, under
// ProtocolKey, and refuses a stream that names one it cannot speak with
// FailedPrecondition, naming both, before reading a message: a message
// of a protocol it does not know could be misread, and Raft trusts its
// input. A stream that names none comes from a replica built before the
// key existed, whose protocol is version 1.
//
// Raise Protocol when the stream's content changes so that an older
// replica would misread it; raise MinProtocol only when this replica can
// no longer speak an old version. docs/operations.md#upgrades says what
// a rolling upgrade may mix.
const (
	Protocol    = 1
	MinProtocol = 1
	ProtocolKey = "leasehold-peer-protocol"
)

// protocolOf reads the peer protocol version of an incoming stream from
// its metadata: 1 when it names none.
func protocolOf(ctx context.Context) (int, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(ProtocolKey)
	if len(v) == 0 {
		return 1, nil
	}
	n, err := strconv.Atoi(v[len(v)-1])
	if err != nil || n < 1 {
		return 0, status.Errorf(codes.InvalidArgument, "peers: %s %q is not a protocol version", ProtocolKey, v[len(v)-1])
	}
	return n, nil
}

// checkProtocol refuses a stream whose sender speaks a peer protocol this
// replica cannot: FailedPrecondition, naming both versions.
func checkProtocol(ctx context.Context, min, max int) error {
	v, err := protocolOf(ctx)
	if err != nil {
		return err
	}
	if v < min || v > max {
		return status.Errorf(codes.FailedPrecondition,
			"peers: the sending replica speaks peer protocol %d, this one speaks %s: upgrade one replica at a time (docs/operations.md#upgrades)",
			v, versions(min, max))
	}
	return nil
}

func versions(min, max int) string {
	if min == max {
		return strconv.Itoa(max)
	}
	return fmt.Sprintf("%d to %d", min, max)
}

// withProtocol names version in an outgoing stream's metadata.
func withProtocol(ctx context.Context, version int) context.Context {
	return metadata.AppendToOutgoingContext(ctx, ProtocolKey, strconv.Itoa(version))
}

// protocol is the version this replica speaks and names (Config.Protocol).
func (t *Transport) protocol() int {
	if t.cfg.Protocol > 0 {
		return t.cfg.Protocol
	}
	return Protocol
}

// minProtocol is the oldest version this replica speaks.
func (t *Transport) minProtocol() int {
	if t.cfg.MinProtocol > 0 {
		return t.cfg.MinProtocol
	}
	return MinProtocol
}
