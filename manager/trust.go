package manager

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/certs"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// The Manager's trust boundary (docs/security.md). With Config.Certs
// set, every call arrives over mutual TLS and its caller is the identity
// its certificate carries (package certs). Each gRPC method admits some
// roles; the lease stream further admits only messages whose Owner ID is
// the caller's and whose namespace its certificate names; the Raft stream
// only messages from the replica the certificate names, while it is a
// member. Everything else is refused with Unauthenticated (no valid
// certificate) or PermissionDenied (a valid one that does not allow it),
// with a message naming the identity, the role and the namespace, and
// counted in leasehold_refused_total{role,reason}.

// methodRoles are the roles each method admits.
var methodRoles = map[string][]certs.Role{
	pb.Leases_Session_FullMethodName:   {certs.Owner, certs.Replica}, // a replica relays Owners' streams
	pb.Lookups_Sync_FullMethodName:     {certs.Lookup, certs.Operator},
	pb.Lookups_Watch_FullMethodName:    {certs.Lookup, certs.Operator}, // Sync in two (watch.go)
	pb.Lookups_Poll_FullMethodName:     {certs.Lookup, certs.Operator},
	pb.Admin_Status_FullMethodName:     {certs.Lookup, certs.Operator, certs.Owner, certs.Replica},
	pb.Admin_AddPeer_FullMethodName:    {certs.Operator},
	pb.Admin_RemovePeer_FullMethodName: {certs.Operator},
	pb.Admin_Drain_FullMethodName:      {certs.Operator},
	pb.Admin_Undrain_FullMethodName:    {certs.Operator},
	pb.Admin_Forget_FullMethodName:     {certs.Operator},
	pb.Admin_Backup_FullMethodName:     {certs.Operator},
	pb.Admin_Holder_FullMethodName:     {certs.Lookup, certs.Operator}, // reads the table, as Sync does, in the caller's namespaces
	pb.Raft_Send_FullMethodName:        {certs.Replica},
}

// servedElsewhere are the services of the leasehold API that the Manager
// does not serve, so that need no entry in methodRoles: the gateway's,
// which checks its own callers (package gateway), and the sidecar agent's,
// which serves the application beside it (internal/agent).
var servedElsewhere = []string{pb.Gateway_ServiceDesc.ServiceName, pb.Agent_ServiceDesc.ServiceName}

// The metadata keys with which a replica relaying an Owner's lease stream
// (client.RelayKey) tells the leader whose stream it is: the relaying
// replica checked the Owner's certificate, the leader trusts the names
// from a replica's certificate only.
const (
	relayedOwnerKey     = "leasehold-relayed-owner"
	relayedNamespaceKey = "leasehold-relayed-namespace"
)

// refusals counts the calls and messages refused at the trust boundary.
var refusalsOpts = prometheus.CounterOpts{
	Name: "leasehold_refused_total",
	Help: "Calls and messages the Manager refused at its trust boundary, by the caller's role (\"none\" without a valid certificate) and the reason.",
}

func newRefusals() *prometheus.CounterVec {
	return prometheus.NewCounterVec(refusalsOpts, []string{"role", "reason"})
}

// refuse counts a refusal and returns its status.
func (s *Server) refuse(code codes.Code, role, reason, format string, args ...any) error {
	s.refused.WithLabelValues(role, reason).Inc()
	msg := fmt.Sprintf(format, args...)
	s.cfg.Logger.Warn("refused at the trust boundary", "role", role, "reason", reason, "why", msg)
	return status.Error(code, "leasehold: "+msg)
}

// refusedAtHandshake counts and logs a client refused at the TLS
// handshake for its certificate (none, another CA's, expired): its
// connection is closed there, and it learns only the TLS alert
// ("certificate required", "bad certificate").
func (s *Server) refusedAtHandshake(why error) {
	s.refused.WithLabelValues("none", "certificate").Inc()
	s.quiet.warn(s.cfg.Logger, "handshake", "refused at the trust boundary: closed at the TLS handshake", "role", "none", "reason", "certificate", "why", why.Error())
}

// caller returns the identity of a call's client, or the refusal of a
// caller without a valid certificate.
func (s *Server) caller(ctx context.Context) (certs.Identity, error) {
	id, err := certs.PeerIdentity(ctx)
	if err != nil {
		return id, s.refuse(codes.Unauthenticated, "none", "certificate", "%v", err)
	}
	return id, nil
}

// admit checks that the caller's role may call method. It runs on every
// stream's goroutine, which keeps for the stream's whole life the stack
// its deepest call grew it to: the admitted path is kept to a small frame
// and the refusals, whose formatting takes a large one, are a call of
// their own (TestIdleStreamMemory's Watches over TLS).
func (s *Server) admit(ctx context.Context, method string) error {
	if s.cfg.Certs == nil {
		return nil
	}
	if id, err := certs.PeerIdentity(ctx); err == nil && slices.Contains(methodRoles[method], id.Role) {
		return nil
	}
	return s.refuseCall(ctx, method)
}

// refuseCall is admit's refusal of a call: it refuses whatever it is
// given, so that it can admit nothing that admit did not.
//
//go:noinline
func (s *Server) refuseCall(ctx context.Context, method string) error {
	id, err := s.caller(ctx)
	if err != nil {
		return err
	}
	want, ok := methodRoles[method]
	if !ok {
		return s.refuse(codes.PermissionDenied, string(id.Role), "method", "%s may not call %s", id, method)
	}
	return s.refuse(codes.PermissionDenied, string(id.Role), "role", "%s may not call %s: it is for the %s role", id, shortMethod(method), rolesText(want))
}

func shortMethod(m string) string { return m[strings.LastIndex(m, "/")+1:] }

func rolesText(rs []certs.Role) string {
	ss := make([]string, len(rs))
	for i, r := range rs {
		ss[i] = string(r)
	}
	return strings.Join(ss, " or ")
}

// trustOptions are the server options that put the trust boundary around
// every method: TLS credentials and the role check.
func (s *Server) trustOptions() []grpc.ServerOption {
	if s.cfg.Certs == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.Creds(certs.ServerCredentials(s.cfg.Certs, s.refusedAtHandshake)),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := s.admit(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := s.admit(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// leaseSpeaker is who may speak on a lease stream: the Owner whose
// certificate the stream's caller presented, or, on a stream a replica
// relays, the Owner it relays for.
func (s *Server) leaseSpeaker(ctx context.Context) (certs.Identity, error) {
	id, err := s.caller(ctx)
	if err != nil || id.Role != certs.Replica {
		return id, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	owner := md.Get(relayedOwnerKey)
	if len(md.Get(relayedKey)) == 0 || len(owner) != 1 {
		return id, s.refuse(codes.PermissionDenied, string(id.Role), "role", "%s may not hold leases: only relay an Owner's stream", id)
	}
	o := certs.Identity{Role: certs.Owner}
	if o.Name, err = url.PathUnescape(owner[0]); err != nil {
		return id, s.refuse(codes.InvalidArgument, string(id.Role), "relay", "%s relayed a malformed Owner name", id)
	}
	for _, ns := range md.Get(relayedNamespaceKey) {
		n, err := url.PathUnescape(ns)
		if err != nil {
			return id, s.refuse(codes.InvalidArgument, string(id.Role), "relay", "%s relayed a malformed namespace", id)
		}
		o.Namespaces = append(o.Namespaces, n)
	}
	return o, nil
}

// relayIdentity adds to ctx, the context of the stream a replica opens to
// its leader on an Owner's behalf, who that Owner is.
func (s *Server) relayIdentity(ctx, in context.Context) context.Context {
	if s.cfg.Certs == nil {
		return ctx
	}
	id, err := certs.PeerIdentity(in)
	if err != nil || id.Role != certs.Owner {
		return ctx // the leader refuses the stream: nobody to relay for
	}
	kv := []string{relayedOwnerKey, url.PathEscape(id.Name)}
	for _, ns := range id.Namespaces {
		kv = append(kv, relayedNamespaceKey, url.PathEscape(ns))
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// checkLease refuses a lease message its speaker may not send: one for
// another Owner (a registration, renewal, Leaving or handover in another's
// name), or in a namespace the speaker's certificate does not name.
func (s *Server) checkLease(who certs.Identity, req *protocol.LeaseRequest) error {
	if s.cfg.Certs == nil {
		return nil
	}
	if req.Owner != who.Name {
		return s.refuse(codes.PermissionDenied, string(who.Role), "identity",
			"%s may not speak for Owner %q in namespace %q: an Owner's ID is the one in its certificate", who, req.Owner, req.Namespace)
	}
	if !who.MayUse(req.Namespace) {
		return s.refuse(codes.PermissionDenied, string(who.Role), "namespace",
			"%s may not hold leases in namespace %q", who, req.Namespace)
	}
	return nil
}

// checkSync refuses a Lookup's sync in a namespace its certificate does
// not name.
func (s *Server) checkSync(ctx context.Context, ns string) error {
	if s.cfg.Certs == nil {
		return nil
	}
	id, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if !id.MayUse(ns) {
		return s.refuse(codes.PermissionDenied, string(id.Role), "namespace", "%s may not follow namespace %q", id, ns)
	}
	return nil
}

// peerSender returns the Raft ID of the replica that opened a Raft stream,
// from its certificate.
func (s *Server) peerSender(ctx context.Context) (uint64, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return 0, err
	}
	n, err := id.ReplicaID()
	if err != nil {
		return 0, s.refuse(codes.PermissionDenied, string(id.Role), "role", "%s may not send Raft messages", id)
	}
	return n, nil
}

// warnPlaintext logs loudly when a Manager without certificates listens
// on an address other machines can reach.
func (s *Server) warnPlaintext(lis net.Listener) {
	if s.cfg.Certs != nil {
		return
	}
	if ta, ok := lis.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		s.cfg.Logger.Error("SERVING IN PLAINTEXT ON A NETWORK ADDRESS: anyone who can reach it can register as any Owner, drain, change the group and read the state; run with certificates (docs/security.md)",
			"addr", lis.Addr().String())
	}
}
