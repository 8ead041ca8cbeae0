package manager

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/wire"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// TestPollAfterItsWatchEnded: a Poll that found its Watch just before the
// Watch ended is refused, not handed to the loop after the Watch's close,
// which would make the loop count and serve the ended stream for good.
func TestPollAfterItsWatchEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := NewServer(Config{Insecure: true, Timing: tm})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- s.Run(ctx) }()
		defer func() {
			cancel()
			<-ran
		}()
		// The Watch's stream, as Watch builds it, with no gRPC stream to
		// send on.
		st := &lookupStream{id: s.sessions.Add(1), snd: newSender[syncOut](64, nil), names: &wire.ManagerSyncNames{}}
		w := &watch{st: st, lim: newLimiter(s.cfg.MaxRequestRate), ended: make(chan error, 1)}
		c, id := &clientConn{}, s.watches.Add(1)
		c.add(id, w)
		svc := lookupsService{Server: s}
		req := func(id uint64) *pb.SyncRequest { return &pb.SyncRequest{Namespace: "default", Id: id} }
		if err := svc.poll(ctx, w, req(1)); err != nil {
			t.Fatalf("a Poll of the open Watch: %v", err)
		}
		if n := lookupsServed(s); n != 1 {
			t.Fatalf("the Manager serves %d Lookups with the Watch open, want 1", n)
		}
		// The Watch ends as its handler ends it, then a Poll that had
		// found it comes.
		svc.close(c, id, w)
		if c.watch(id) != nil {
			t.Errorf("Watch %d is still open on its connection once closed", id)
		}
		if err := svc.poll(ctx, w, req(2)); status.Code(err) != codes.Aborted {
			t.Errorf("a Poll of the ended Watch: %v, want Aborted", err)
		}
		if n := lookupsServed(s); n != 0 {
			t.Errorf("the Manager serves %d Lookups once the Watch has ended, want 0", n)
		}
	})
}

// lookupsServed is the number of Lookups of the default namespace in the
// Manager's next status snapshot.
func lookupsServed(s *Server) int {
	time.Sleep(time.Second)
	synctest.Wait()
	for _, ns := range s.Snapshot().Namespaces {
		if ns.Name == "default" {
			return ns.Lookups
		}
	}
	return -1
}
