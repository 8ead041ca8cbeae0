// The relay: a follower passes an Owner's stream on to the leader.

package manager

import (
	"context"
	"errors"
	"io"

	"github.com/leasehold/leasehold/internal/client"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// relayedKey marks a stream a replica opened to its leader on a client's
// behalf; its value is the relaying replica's address. Such a stream is
// never relayed again. Only replicas set and read it, so it is defined
// here; the key a client sets to ask for a relay is client.RelayKey.
const relayedKey = "leasehold-relayed-by"

// relayTo returns the address of the leader to relay a lease stream to:
// the stream asks for a relay, is not itself a relay's, and this replica
// follows a leader it knows. Otherwise it returns "" and the stream is
// served here, or refused naming the leader, as any other. The leader is
// read from the published snapshot, at most publishEvery old: a stale one
// costs a refusal naming the new leader, passed back to the Owner.
func (s *Server) relayTo(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(client.RelayKey)) == 0 || len(md.Get(relayedKey)) > 0 {
		return ""
	}
	ci := s.stats.Load().Cluster
	if ci.Leader == 0 || ci.Leader == s.cfg.ID || ci.LeaderAddr == "" || ci.LeaderAddr == s.cfg.Advertise {
		return ""
	}
	return ci.LeaderAddr
}

// relay carries an Owner's lease stream to the leader at leader: it opens
// the same stream there over this replica's connection to it, marked as a
// relay (relayedKey), and passes messages both ways unchanged,
// each checked for size on the way in as a direct stream's would be. The
// leader's status and trailer (a refusal naming another leader) come back
// as this stream's. The relay holds no state: it is a hop of the network,
// and the leader treats the stream exactly as a direct one, so the
// protocol's rules, and its single-copy argument, are unchanged.
func (s *Server) relay(stream pb.Leases_SessionServer, leader string) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	cc, err := s.relayConn(leader)
	if err != nil {
		return status.Errorf(codes.Unavailable, "leasehold: cannot relay to the leader at %s: %v", leader, err)
	}
	up, err := pb.NewLeasesClient(cc).Session(metadata.AppendToOutgoingContext(s.relayIdentity(ctx, stream.Context()), relayedKey, s.cfg.Advertise))
	if err != nil {
		return status.Errorf(codes.Unavailable, "leasehold: cannot relay to the leader at %s: %v", leader, err)
	}
	s.relays.Add(1)
	defer s.relays.Add(-1)
	s.cfg.Logger.Info("relaying an owner's lease stream to the leader", "leader", leader)
	inErr := make(chan error, 1) // why the Owner's side ended, if not by closing
	go func() {
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				_ = up.CloseSend()
				return
			}
			if err == nil {
				err = s.checkSize(m)
			}
			if err != nil {
				inErr <- err
				cancel()
				return
			}
			if up.Send(m) != nil {
				return // the leader ended the stream: Recv below has its status
			}
		}
	}()
	for {
		m, err := up.Recv()
		if err != nil {
			select {
			case e := <-inErr:
				return e
			default:
			}
			if md := up.Trailer(); len(md) > 0 {
				_ = grpc.SetTrailer(ctx, md)
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if _, ok := status.FromError(err); !ok {
				err = status.Errorf(codes.Unavailable, "leasehold: relaying to the leader at %s: %v", leader, err)
			}
			return err
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
}

// relayConn returns this replica's connection to addr for relayed streams,
// dialled with the peer options on first use; Run closes them.
func (s *Server) relayConn(addr string) (*grpc.ClientConn, error) {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	if s.relayClosed {
		return nil, errors.New("the server is stopping")
	}
	if cc := s.relayConns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := client.Dial(addr, s.cfg.PeerDialOptions)
	if err != nil {
		return nil, err
	}
	if s.relayConns == nil {
		s.relayConns = map[string]*grpc.ClientConn{}
	}
	s.relayConns[addr] = cc
	return cc, nil
}

// closeRelays closes the relay connections, ending every relayed stream.
func (s *Server) closeRelays() {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	s.relayClosed = true
	for addr, cc := range s.relayConns {
		_ = cc.Close()
		delete(s.relayConns, addr)
	}
}

// Relays returns the number of Owner streams this replica relays now.
func (s *Server) Relays() int64 { return s.relays.Load() }
