package manager_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// TestRolesMayCall calls every method of the Manager with a certificate of
// each role, over TLS, and checks that the role check admits exactly the
// methods docs/security.md's roles table gives the role: the others are
// refused with PermissionDenied naming the method. (An admitted call may
// still fail for its own reasons: no such Owner, no read lease.)
func TestRolesMayCall(t *testing.T) {
	testwait.Side(t)
	m := startTLSManager(t, manager.Config{Namespaces: []string{"default"}, DataDir: t.TempDir()})
	may := map[certs.Role][]string{
		certs.Replica:  {"Session", "Status", "Send"},
		certs.Owner:    {"Session", "Status"},
		certs.Lookup:   {"Sync", "Watch", "Poll", "Status", "Holder"},
		certs.Operator: {"Sync", "Watch", "Poll", "Status", "AddPeer", "RemovePeer", "Drain", "Undrain", "Forget", "Backup", "Holder"},
	}
	calls := map[string]func(ctx context.Context, c *grpc.ClientConn) error{
		"Session": func(ctx context.Context, c *grpc.ClientConn) error {
			st, err := pb.NewLeasesClient(c).Session(ctx)
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		"Sync": func(ctx context.Context, c *grpc.ClientConn) error {
			st, err := pb.NewLookupsClient(c).Sync(ctx)
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		"Watch": func(ctx context.Context, c *grpc.ClientConn) error {
			st, err := pb.NewLookupsClient(c).Watch(ctx, &pb.WatchRequest{})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		"Poll": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := pb.NewLookupsClient(c).Poll(ctx, &pb.PollRequest{Watch: 1, Request: &pb.SyncRequest{Namespace: "default"}})
			return err
		},
		"Status": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := pb.NewAdminClient(c).Status(ctx, &pb.StatusRequest{})
			return err
		},
		"AddPeer": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := pb.NewAdminClient(c).AddPeer(ctx, &pb.AddPeerRequest{})
			return err
		},
		"RemovePeer": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := pb.NewAdminClient(c).RemovePeer(ctx, &pb.RemovePeerRequest{Id: 99})
			return err
		},
		"Drain": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := pb.NewAdminClient(c).Drain(ctx, &pb.DrainRequest{Namespace: "default", Owner: "nobody"})
			return err
		},
		"Undrain": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := pb.NewAdminClient(c).Undrain(ctx, &pb.DrainRequest{Namespace: "default", Owner: "nobody"})
			return err
		},
		"Forget": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := pb.NewAdminClient(c).Forget(ctx, &pb.ForgetRequest{Namespace: "default", Owner: "nobody"})
			return err
		},
		"Backup": func(ctx context.Context, c *grpc.ClientConn) error {
			st, err := pb.NewAdminClient(c).Backup(ctx, &pb.BackupRequest{})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		"Holder": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := pb.NewAdminClient(c).Holder(ctx, &pb.HolderRequest{Namespace: "default", Key: 1})
			return err
		},
		"Send": func(ctx context.Context, c *grpc.ClientConn) error {
			st, err := pb.NewRaftClient(c).Send(ctx)
			if err != nil {
				return err
			}
			_, err = st.CloseAndRecv()
			return err
		},
	}
	for role, allowed := range may {
		t.Run(string(role), func(t *testing.T) {
			id := certs.Identity{Role: role, Name: "x"}
			switch role {
			case certs.Replica:
				id.Name = "2"
			case certs.Owner:
				id.Namespaces = []string{"default"}
			}
			conn := dialAs(t, m.addr, m.cert(t, id))
			for name, call := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				err := call(ctx, conn)
				cancel()
				s := status.Convert(err)
				denied := s.Code() == codes.PermissionDenied && strings.Contains(s.Message(), "may not call")
				if want := !slices.Contains(allowed, name); denied != want {
					t.Errorf("%s calling %s: %v; refused by the role check: %v, want %v", role, name, err, denied, want)
				}
				if denied && !strings.Contains(s.Message(), name) {
					t.Errorf("%s calling %s: the refusal %q does not name the method", role, name, s.Message())
				}
			}
		})
	}
	// Every method of the Manager is called above (TestEveryMethodHasRoles
	// checks that each has roles).
	n := 0
	for _, d := range []grpc.ServiceDesc{pb.Leases_ServiceDesc, pb.Lookups_ServiceDesc, pb.Admin_ServiceDesc, pb.Raft_ServiceDesc} {
		for _, md := range d.Methods {
			n++
			if calls[md.MethodName] == nil {
				t.Errorf("%s/%s is not called", d.ServiceName, md.MethodName)
			}
		}
		for _, sd := range d.Streams {
			n++
			if calls[sd.StreamName] == nil {
				t.Errorf("%s/%s is not called", d.ServiceName, sd.StreamName)
			}
		}
	}
	if n != len(calls) {
		t.Errorf("%d methods served, %d called", n, len(calls))
	}
}
