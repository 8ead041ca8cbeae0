package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
)

// streamOwner serves grpc.testing.TestService's client and bidirectional
// streams: StreamingInputCall sums the sizes of the payloads it receives;
// FullDuplexCall answers each message at once with name:payload.
type streamOwner struct {
	testgrpc.UnimplementedTestServiceServer
	name string
}

func (o *streamOwner) StreamingInputCall(st grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	var n int32
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: n})
		}
		if err != nil {
			return err
		}
		n += int32(len(m.GetPayload().GetBody()))
	}
}

func (o *streamOwner) FullDuplexCall(st grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		body := []byte(o.name + ":" + string(m.GetPayload().GetBody()))
		if err := st.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: body}}); err != nil {
			return err
		}
	}
}

// startStreamOwner serves a streamOwner; refuse, if set, may refuse a call
// before it reads any message, as an Owner that does not hold the key does.
func startStreamOwner(t *testing.T, name string, refuse func(ctx context.Context) error) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if refuse != nil {
			if err := refuse(ss.Context()); err != nil {
				return err
			}
		}
		return h(srv, ss)
	}))
	testgrpc.RegisterTestServiceServer(s, &streamOwner{name: name})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestGRPCStreams: client-streaming and bidirectional calls pass through
// the gateway as streams (each message of a bidirectional call is answered
// before the client sends the next, which a gateway holding the request
// until its end could not do), and a call an Owner refuses before reading
// is sent again, from its first message, to the Owner the copy names next.
func TestGRPCStreams(t *testing.T) {
	var fr *fakeRouter
	var refusals atomic.Int32
	var refuseMu sync.Mutex
	b := startStreamOwner(t, "B", nil)
	a := startStreamOwner(t, "A", func(ctx context.Context) error {
		refuseMu.Lock()
		defer refuseMu.Unlock()
		refusals.Add(1)
		fr.set("alice", "B", b) // the copy catches up
		return owner.RefuseGRPC(ctx, owner.RefusedMoving, "range moving")
	})
	fr = &fakeRouter{routes: map[keyspace.Key]lookup.Route{}}
	fr.set("bob", "B", b)
	g, err := New(t.Context(), Config{Insecure: true,
		Routes:       []Route{{Name: "test", Prefix: "/grpc.testing.TestService/", Key: "header:x-key", Timeout: Duration(10 * time.Second)}},
		MaxBodyBytes: 64 << 10,
		NewRouter:    func(context.Context, string, func(lookup.Loss)) (Router, error) { return fr, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	client := testgrpc.NewTestServiceClient(grpcClient(t, h2cServer(t, g)))
	call := func(key string) (context.Context, *metadata.MD) {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "x-key", key), 10*time.Second)
		t.Cleanup(cancel)
		return ctx, new(metadata.MD)
	}

	// Client streaming, refused once by A after the client sent its
	// messages: B gets all of them.
	fr.set("alice", "A", a)
	ctx, hdr := call("alice")
	cs, err := client.StreamingInputCall(ctx, grpc.Header(hdr))
	if err != nil {
		t.Fatal(err)
	}
	want := int32(0)
	for i := range 5 {
		body := bytes.Repeat([]byte{'x'}, 1000*(i+1))
		want += int32(len(body))
		if err := cs.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: body}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	resp, err := cs.CloseAndRecv()
	if err != nil || resp.GetAggregatedPayloadSize() != want {
		t.Fatalf("client stream for alice: %v %v, want %d bytes counted", resp, err, want)
	}
	if o, r := hdr.Get("leasehold-owner"), hdr.Get("leasehold-retries"); len(o) != 1 || o[0] != "B" || r[0] != "1" || refusals.Load() != 1 {
		t.Errorf("client stream answered by %v after %v retries, %d refusals; want B after 1, 1", o, r, refusals.Load())
	}

	// Bidirectional, one message at a time, to B and (refused by A first) for alice.
	for _, tc := range []struct{ key, refusedBy string }{{"bob", ""}, {"alice", "A"}} {
		if tc.refusedBy != "" {
			fr.set(tc.key, tc.refusedBy, a)
		}
		before := refusals.Load()
		ctx, hdr := call(tc.key)
		bs, err := client.FullDuplexCall(ctx, grpc.Header(hdr))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			msg := fmt.Sprintf("%s-%d", tc.key, i)
			if err := bs.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(msg)}}); err != nil {
				t.Fatalf("%s: send %d: %v", tc.key, i, err)
			}
			m, err := bs.Recv()
			if err != nil || string(m.GetPayload().GetBody()) != "B:"+msg {
				t.Fatalf("%s: answer %d = %v %v, want B:%s", tc.key, i, m, err, msg)
			}
		}
		if err := bs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := bs.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: end of the stream: %v, want EOF", tc.key, err)
		}
		wantRefused := int32(0)
		if tc.refusedBy != "" {
			wantRefused = 1
		}
		if got := refusals.Load() - before; got != wantRefused || hdr.Get("leasehold-owner")[0] != "B" {
			t.Errorf("%s: %d refusals, answered by %v; want %d, B", tc.key, got, hdr.Get("leasehold-owner"), wantRefused)
		}
	}
}

// TestReplayBody: every attempt reads the stream from its first byte, an
// attempt that is over reads no more (what it read stays for the next),
// and past the bound, or once committed, the start is no longer kept.
func TestReplayBody(t *testing.T) {
	src := io.NopCloser(iotest.OneByteReader(strings.NewReader("0123456789")))
	b := newReplayBody(src, 6)
	a1, ok := b.attempt()
	if !ok {
		t.Fatal("no first attempt")
	}
	p := make([]byte, 4)
	if n, err := io.ReadFull(a1, p); n != 4 || err != nil || string(p) != "0123" {
		t.Fatalf("first attempt read %q %v", p[:n], err)
	}
	a2, ok := b.attempt()
	if !ok {
		t.Fatal("no second attempt within the bound")
	}
	if n, err := a1.Read(p); n != 0 || !errors.Is(err, errAttemptOver) {
		t.Errorf("the first attempt after the second began: %d %v, want errAttemptOver", n, err)
	}
	got, err := io.ReadAll(a2)
	if err != nil || string(got) != "0123456789" {
		t.Fatalf("second attempt read %q %v, want the whole stream", got, err)
	}
	if _, ok := b.attempt(); ok {
		t.Error("a third attempt after 10 bytes, past the bound of 6")
	}

	c := newReplayBody(io.NopCloser(strings.NewReader("abc")), 100)
	c1, _ := c.attempt()
	c.commit()
	if got, _ := io.ReadAll(c1); string(got) != "abc" {
		t.Errorf("after commit the live attempt read %q, want abc", got)
	}
	if _, ok := c.attempt(); ok {
		t.Error("an attempt after commit")
	}
}
