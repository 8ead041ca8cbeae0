package agent

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/keyspace"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// The HTTP/JSON mirror of the Agent service (docs/agent.md):
//
//	GET  /v1/session        the Session stream: one AgentEvent per line (JSON)
//	POST /v1/session/{id}   one AppMessage of the session named by its first event → 204
//	POST /v1/check          a CheckRequest → a CheckResponse
//
// gRPC is served on the same listener (HTTP/2 without TLS, as on a local
// socket; TLS would only hide what the socket's permissions already keep
// to the application's user).

var jsonOut = protojson.MarshalOptions{UseProtoNames: true}
var jsonIn = protojson.UnmarshalOptions{}

// Handler returns the agent's HTTP handler: the JSON mirror and gRPC. With
// a token, every request must carry "Authorization: Bearer <token>" (the
// loopback TCP listener, which every local user can reach).
func (a *Agent) Handler(token string) http.Handler {
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxConcurrentStreams(64))
	pb.RegisterAgentServer(gs, grpcAgent{a: a})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/session", a.httpSession)
	mux.HandleFunc("POST /v1/session/{id}", a.httpMessage)
	mux.HandleFunc("POST /v1/check", a.httpCheck)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				http.Error(w, "agent: this listener needs the header Authorization: Bearer <the agent's token>", http.StatusUnauthorized)
				return
			}
		}
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Serve serves the agent on l until ctx ends.
func (a *Agent) Serve(ctx context.Context, l net.Listener, token string) error {
	srv := &http.Server{Handler: a.Handler(token), ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 16 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (a *Agent) httpSession(w http.ResponseWriter, r *http.Request) {
	s, err := a.open(r.Context())
	if errors.Is(err, ErrBusy) {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	} else if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer s.end("the application's stream ended")
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.endc:
			return
		case ev := <-s.events:
			b, err := jsonOut.Marshal(ev)
			if err != nil {
				return
			}
			_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.AppTimeout))
			if _, err := w.Write(append(b, '\n')); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	}
}

func (a *Agent) httpMessage(w http.ResponseWriter, r *http.Request) {
	s := a.session(r.PathValue("id"))
	if s == nil {
		http.Error(w, "agent: no such session (it ended, or another is open)", http.StatusNotFound)
		return
	}
	var m pb.AppMessage
	if err := readJSON(w, r, &m); err != nil {
		return
	}
	if err := s.handle(&m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) httpCheck(w http.ResponseWriter, r *http.Request) {
	var m pb.CheckRequest
	if err := readJSON(w, r, &m); err != nil {
		return
	}
	s := a.openSession()
	if s == nil {
		http.Error(w, "agent: no session is open", http.StatusConflict)
		return
	}
	b, err := jsonOut.Marshal(s.check(keyspace.Key(m.GetKey())))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// readJSON reads one message of at most MaxMessageBytes, answering 413 or
// 400 itself when it cannot.
func readJSON(w http.ResponseWriter, r *http.Request, m proto.Message) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxMessageBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		http.Error(w, fmt.Sprintf("agent: the body is over %d bytes (MaxMessageBytes)", MaxMessageBytes), http.StatusRequestEntityTooLarge)
		return err
	} else if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return err
	}
	if err := jsonIn.Unmarshal(b, m); err != nil {
		http.Error(w, "agent: "+err.Error(), http.StatusBadRequest)
		return err
	}
	return nil
}

// grpcAgent is the gRPC face of the same calls.
type grpcAgent struct {
	pb.UnimplementedAgentServer
	a *Agent
}

func (g grpcAgent) Session(st pb.Agent_SessionServer) error {
	s, err := g.a.open(st.Context())
	if errors.Is(err, ErrBusy) {
		return status.Error(codes.FailedPrecondition, err.Error())
	} else if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	defer s.end("the application's stream ended")
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := st.Recv()
			if err == nil {
				err = s.handle(m)
			}
			if err != nil {
				recvErr <- err
				return
			}
		}
	}()
	for {
		select {
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return status.Error(codes.InvalidArgument, err.Error())
		case <-s.endc:
			return status.Error(codes.Aborted, "agent: the session ended")
		case ev := <-s.events:
			if err := st.Send(ev); err != nil {
				return err
			}
		}
	}
}

func (g grpcAgent) Check(_ context.Context, m *pb.CheckRequest) (*pb.CheckResponse, error) {
	s := g.a.openSession()
	if s == nil {
		return nil, status.Error(codes.FailedPrecondition, "agent: no session is open")
	}
	return s.check(keyspace.Key(m.GetKey())), nil
}
