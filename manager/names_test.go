package manager_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// wireLog records the lease messages an Owner's stream carries, as they
// go on and come off the wire.
type wireLog struct {
	mu    sync.Mutex
	sent  []*pb.LeaseRequest
	heard []*pb.LeaseResponse
}

type loggedStream struct {
	grpc.ClientStream
	log *wireLog
}

func (s loggedStream) SendMsg(m any) error {
	if r, ok := m.(*pb.LeaseRequest); ok {
		s.log.mu.Lock()
		s.log.sent = append(s.log.sent, &pb.LeaseRequest{Namespace: r.Namespace, Owner: r.Owner, Addr: r.Addr, Seq: r.Seq, NamesOnce: r.NamesOnce})
		s.log.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s loggedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*pb.LeaseResponse); ok && err == nil {
		s.log.mu.Lock()
		s.log.heard = append(s.log.heard, &pb.LeaseResponse{Namespace: r.Namespace, Owner: r.Owner, Incarnation: r.Incarnation,
			Seq: r.Seq, NamesOnce: r.NamesOnce, RenewNanos: r.RenewNanos})
		s.log.mu.Unlock()
	}
	return err
}

// An Owner and the Manager name themselves once per stream: after the
// first message each way, requests and responses leave their names out,
// and the session goes on as before — the Owner holds the whole key space
// and keeps it renewed.
func TestNamesSaidOncePerStream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		c := startManager(t, manager.Config{Timing: tm, Insecure: true})
		defer c.stop(t)
		ctx := context.Background()
		log := &wireLog{}
		dial := append(c.dial(), grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
			method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return loggedStream{s, log}, nil
		}))
		o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{
			Manager:     "passthrough:///bufnet",
			DialOptions: dial,
			Timing:      tm,
		}, ID: "a", Addr: "a:1"})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(ctx)
		time.Sleep(tm.ManagerLease + 6*tm.Renew)
		synctest.Wait()
		for _, k := range []keyspace.Key{0, 1 << 63, ^keyspace.Key(0)} {
			if _, ok := o.CheckLeaseNow(k); !ok {
				t.Fatalf("the Owner does not hold key %x", k)
			}
		}

		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.sent) < 8 || len(log.heard) < 8 {
			t.Fatalf("%d requests and %d responses on the wire; want several renewals", len(log.sent), len(log.heard))
		}
		if r := log.sent[0]; r.Owner != "a" || r.Addr != "a:1" || r.Namespace != "default" || !r.NamesOnce {
			t.Errorf("first request: %+v; want full names and names_once", r)
		}
		if r := log.heard[0]; r.Owner != "a" || r.Incarnation == 0 || !r.NamesOnce {
			t.Errorf("first response: %+v; want full names and names_once", r)
		}
		for _, r := range log.sent[2:] {
			if r.Owner != "" || r.Addr != "" || r.Namespace != "" {
				t.Errorf("request %d repeats its names: %+v", r.Seq, r)
			}
		}
		for _, r := range log.heard[1:] {
			if r.Owner != "" || r.Incarnation != 0 || r.RenewNanos != 0 {
				t.Errorf("response %d repeats its names: %+v", r.Seq, r)
			}
		}
	})
}
