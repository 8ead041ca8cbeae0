package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/leasehold/leasehold/certs"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// The hostile soak's attackers at the Manager's client boundary: strangers
// whose undecodable calls once stayed on the Manager's heap, strangers
// holding connection slots, a caller past the unary call rate, and Owners
// whose ring points would take a namespace past its range limit.

const (
	// soakMessageBytes is the soak Manager's --max-message-bytes: as large
	// as it can be while a message just past it is still read and refused
	// by the codec, naming the flag, rather than unread by gRPC (whose
	// limit is the larger of it and a Raft message part, 1 MiB).
	soakMessageBytes = 1_000_000
	// soakRangeNamespace is the namespace the Owners past --max-ranges try
	// to join: one of its own, so that nothing admitted by mistake takes
	// ranges from the kv Owners (the kv values have no migration).
	soakRangeNamespace = "wide"
	// soakMaxRanges is the soak Manager's --max-ranges.
	soakMaxRanges = 1000
	// heapSlack is how much the Manager's heap in use (after a collection)
	// may grow over the attack: a shared machine's noise. A Manager that
	// kept each undecodable call's message grew by about 1 MB a call, some
	// 80 MB over the attack.
	heapSlack = 32 << 20
)

// rawCodec sends the bytes it is given as a message and receives a
// message's bytes: a client that sends what no encoder would.
type rawCodec struct{}

func (rawCodec) Name() string                  { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}

// undecodableDrain is a DrainRequest of about size bytes that does not
// decode: size bytes in a field DrainRequest does not have (kept as
// unknown while decoding), then bad UTF-8 in its namespace.
func undecodableDrain(size int) []byte {
	b := protowire.AppendTag(nil, 1000, protowire.BytesType)
	b = protowire.AppendBytes(b, make([]byte, size))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, []byte{0xff, 0xfe})
}

// undecodableBackup is a BackupRequest of about size bytes that does not
// decode: size bytes in an unknown field, then a field cut short (a
// BackupRequest has no string field that bad UTF-8 could spoil).
func undecodableBackup(size int) []byte {
	b := protowire.AppendTag(nil, 1000, protowire.BytesType)
	b = protowire.AppendBytes(b, make([]byte, size))
	b = protowire.AppendTag(b, 1001, protowire.BytesType)
	return protowire.AppendVarint(b, 100) // and no byte of the 100
}

// rawUnary calls method on conn with body and returns its error; a call
// that is served is an error too.
func rawUnary(ctx context.Context, conn *grpc.ClientConn, method string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, method, &body, new([]byte), grpc.ForceCodec(rawCodec{})); err != nil {
		return err
	}
	return fmt.Errorf("%s was served", method)
}

// rawTwice opens the server-streaming method on conn and sends first and
// second as its request (a client that does not keep to the one message
// it takes), and returns how the call ends.
func rawTwice(ctx context.Context, conn *grpc.ClientConn, method string, first, second []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	_ = st.SendMsg(&first)
	_ = st.SendMsg(&second)
	_ = st.CloseSend()
	for {
		var b []byte
		if err := st.RecvMsg(&b); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%s was served", method)
			}
			return err
		}
	}
}

// noteHandshake is note for a client refused at the TLS handshake, whose
// refusal is the TLS alert want. Under TLS 1.3 a client has finished its
// side of the handshake before the server checks its certificate, and
// writes on (gRPC's preface, a request); the Manager closes the connection
// as it sends the alert, with what the client wrote unread, and the reset
// that this sends may reach the client before it reads the alert (a
// "broken pipe" on its next write). Such a client, refused without being
// told why, is counted apart: it was refused all the same.
func (h *hostile) noteHandshake(kind string, err error, want string) {
	msg := err.Error()
	if strings.Contains(msg, want) || !closedConn(msg) {
		h.note(kind, err, want)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.got[kind]
	r.closed++
	r.closedExample = msg
}

// closedConn says whether an error's message is that of a connection
// closed by the other end.
func closedConn(msg string) bool {
	for _, s := range []string{"EOF", "broken pipe", "connection reset by peer"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// slotStrangers are n clients without a certificate, each connecting over
// TLS again and again (at most once a second) and holding its connection
// as long as the Manager lets it: each must be refused at the handshake,
// so that none holds one of --max-connections' slots. (A Manager that
// completed their handshakes kept each until the idle timeout, and they
// locked the operator out.)
func (h *hostile) slotStrangers(ctx context.Context, addr string, n int) {
	const kind = "no certificate, at the slot limit"
	h.expect(kind)
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}}
	for i := range n {
		h.wg.Go(func() {
			// Spread over the second: a connection holds a slot through its
			// handshake, and n handshakes at once would fill the slots for
			// as long as they take.
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(i) * time.Second / time.Duration(n)):
			}
			for ctx.Err() == nil {
				next := time.After(time.Second)
				err := holdWithoutCertificate(ctx, addr, cfg)
				if ctx.Err() == nil {
					h.noteHandshake(kind, err, "certificate required")
				}
				select {
				case <-ctx.Done():
				case <-next:
				}
			}
		})
	}
}

// holdWithoutCertificate connects to addr with cfg, speaks HTTP/2's
// preface and keeps the connection until the server ends it, and returns
// how it ended.
func holdWithoutCertificate(ctx context.Context, addr string, cfg *tls.Config) error {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer context.AfterFunc(ctx, func() { nc.Close() })()
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(nc, cfg)
	if err := tc.Handshake(); err != nil {
		return err
	}
	// TLS 1.3: the client's side of the handshake is done before the
	// server has checked the client's certificate; its verdict comes with
	// the first read.
	if _, err := tc.Write([]byte(http2.ClientPreface)); err != nil {
		return err
	}
	fr := http2.NewFramer(tc, tc)
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return fmt.Errorf("held until the server's GOAWAY %v %q", g.ErrCode, g.DebugData())
		}
	}
}

// rangeOwners are four Owners of namespace wide, each with its own
// certificate and connection, joining at once (every 500 ms) with
// capacity 100, 6,400 ring points: each must be refused naming
// --max-ranges, whose limit even one of them would pass. (A Manager that
// looked at the table alone admitted the first: 6,400 ranges.)
func (h *hostile) rangeOwners(ctx context.Context, owners []pb.LeasesClient, send func(pb.LeasesClient, ...*pb.LeaseRequest) error) {
	const kind = "owner past the range limit"
	h.expect(kind)
	inc := uint64(time.Now().UnixNano())
	h.wg.Go(func() {
		for ctx.Err() == nil {
			var wg sync.WaitGroup
			for i, o := range owners {
				wg.Go(func() {
					id := fmt.Sprintf("wide-%d", i)
					err := send(o, &pb.LeaseRequest{Namespace: soakRangeNamespace, Owner: id, Addr: "127.0.0.1:1",
						Incarnation: inc, Seq: 1, Capacity: 100})
					if ctx.Err() == nil {
						h.note(kind, err, "--max-ranges")
					}
				})
			}
			wg.Wait()
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
}

// operatorWatch is what the operator's leasehold status saw during the
// attack: how many calls, how many failed (the first failure), and the
// most ranges namespace wide had.
type operatorWatch struct {
	mu        sync.Mutex
	calls     int
	failed    int
	firstErr  string
	maxRanges int

	// leasehold_ranges of namespace wide, from the metrics listener.
	metricReads, metricMax int
}

// watchStatus runs the operator's leasehold status of namespace wide every
// second until ctx ends.
func (h *hostile) watchStatus(ctx context.Context, c *cli) {
	h.wg.Go(func() {
		for ctx.Err() == nil {
			s, err := c.statusOf(soakRangeNamespace)
			if ctx.Err() != nil {
				return
			}
			w := &h.operator
			w.mu.Lock()
			w.calls++
			if err != nil {
				w.failed++
				if w.firstErr == "" {
					w.firstErr = err.Error()
				}
			} else {
				w.maxRanges = max(w.maxRanges, s.Ranges)
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
}

// statusOf runs leasehold status --json for namespace ns.
func (c *cli) statusOf(ns string) (status, error) {
	var s status
	cmd := command(c.t, c.leasehold, "status", "--manager", c.manager, "--namespace", ns, "--json", "--timeout", "3s")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return s, fmt.Errorf("leasehold status --namespace %s: %w", ns, err)
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return s, fmt.Errorf("leasehold status --namespace %s: %w in %q", ns, err, out)
	}
	return s, nil
}

// metricsClient reads the Manager's metrics listener at addr with the
// operator's certificate.
type metricsClient struct {
	addr string
	hc   *http.Client
}

func newMetricsClient(t *testing.T, addr string) *metricsClient {
	tr := sourceFor(t, certs.Operator, "e2e").HTTPTransport(certs.Replica)
	t.Cleanup(tr.CloseIdleConnections)
	return &metricsClient{addr: addr, hc: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
}

func (m *metricsClient) get(path string) (io.ReadCloser, error) {
	resp, err := m.hc.Get("https://" + m.addr + path)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", path, resp.Status)
	}
	return resp.Body, nil
}

// value returns the value of the sample named series (with its labels, as
// /metrics prints them).
func (m *metricsClient) value(series string) (float64, error) {
	body, err := m.get("/metrics")
	if err != nil {
		return 0, err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("/metrics: no %s (%v)", series, sc.Err())
}

// heapInUse returns the Manager's go_memstats_heap_inuse_bytes after two
// collections (asked of its /debug/pprof/heap?gc=1): without them it would
// count the garbage of the last calls too.
func (m *metricsClient) heapInUse() (uint64, error) {
	for range 2 {
		body, err := m.get("/debug/pprof/heap?gc=1")
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, body)
		body.Close()
	}
	v, err := m.value("go_memstats_heap_inuse_bytes")
	return uint64(v), err
}

// watchRanges reads leasehold_ranges of namespace wide every 250 ms until
// ctx ends, and keeps the most it saw: unlike the operator's status, it
// is read from the start of the attack, while the idle connections fill
// the slots.
func (h *hostile) watchRanges(ctx context.Context, m *metricsClient) {
	series := fmt.Sprintf("leasehold_ranges{namespace=%q}", soakRangeNamespace)
	h.wg.Go(func() {
		for ctx.Err() == nil {
			v, err := m.value(series)
			w := &h.operator
			w.mu.Lock()
			if err == nil {
				w.metricReads++
				w.metricMax = max(w.metricMax, int(v))
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
}
