package manager_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// TestIdleStreamsHoldOneGoroutineEach opens many Lookup streams on one
// connection, each answered once, and counts the Manager's goroutines
// that serve them once all are idle: one each, the handler waiting in
// Recv. A stream's sender runs only while it has messages to send; a
// parked sender per stream doubled an idle stream's stacks, the largest
// part of its memory at the Manager. Each stream is then asked again and
// answered, so a sender that ended starts again when there is more.
func TestIdleStreamsHoldOneGoroutineEach(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		c := startManager(t, manager.Config{Insecure: true, Timing: tm})
		defer c.stop(t)
		conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const n = 50
		streams := make([]pb.Lookups_SyncClient, n)
		ask := func(id uint64) {
			t.Helper()
			for i, st := range streams {
				if err := st.Send(&pb.SyncRequest{Namespace: "default", Id: id}); err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				m, err := st.Recv()
				if err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				if m.GetId() != id {
					t.Fatalf("stream %d: answer to %d, want %d", i, m.GetId(), id)
				}
			}
		}
		for i := range streams {
			if streams[i], err = pb.NewLookupsClient(conn).Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		ask(1)
		synctest.Wait()
		if got := streamGoroutines(); got > n {
			t.Errorf("%d goroutines of the Manager serve %d idle streams, want at most one each", got, n)
		}
		time.Sleep(tm.Sync / 8)
		ask(2)
	})
}

// streamGoroutines counts the goroutines running the Manager's stream
// handlers and senders: those of the caller's synctest bubble when it runs
// in one, so that the Managers of tests running beside it are not counted,
// else those of the whole process.
func streamGoroutines() int {
	buf := make([]byte, 64<<10)
	bubble := bubbleOf(string(buf[:runtime.Stack(buf, false)]))
	n := 0
	for _, g := range strings.Split(allStacks(), "\n\n") {
		if bubble != "" && bubbleOf(g) != bubble {
			continue
		}
		if strings.Contains(g, "manager.serveStream") || strings.Contains(g, "manager.(*sender") || strings.Contains(g, "manager.lookupsService.Watch") {
			n++
		}
	}
	return n
}

// bubbleOf returns the synctest bubble that a goroutine's stack trace
// names in its header ("goroutine 7 [select, synctest bubble 3]:"), or ""
// for a goroutine in none.
func bubbleOf(stack string) string {
	header, _, _ := strings.Cut(stack, "\n")
	_, after, ok := strings.Cut(header, ", synctest bubble ")
	if !ok {
		return ""
	}
	if end := strings.IndexFunc(after, func(r rune) bool { return r < '0' || r > '9' }); end >= 0 {
		after = after[:end]
	}
	return after
}
