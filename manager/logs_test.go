package manager_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// records returns the JSON records logged with message msg.
func (b *syncBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.b.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// TestLogs checks what the Manager logs about an Owner that joins and
// leaves: at info its joining, its leaving and the loss of its ranges'
// state; at debug every change of the lease table with the owner, range
// and LGN.
func TestLogs(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tm := protocol.Fast()
				var buf syncBuffer
				log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
				srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: tm, Logger: log})
				if err != nil {
					t.Fatal(err)
				}
				lis := bufconn.Listen(1 << 20)
				dial := []grpc.DialOption{
					grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
					grpc.WithTransportCredentials(insecure.NewCredentials()),
				}
				ctx, cancel := context.WithCancel(context.Background())
				served := make(chan error, 1)
				go func() { served <- srv.Serve(ctx, lis) }()
				o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{
					Manager:     "passthrough:///bufnet",
					DialOptions: dial,
					Timing:      tm,
				}, ID: "a", Addr: "a:1"})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(tm.ManagerLease + 2*tm.Renew)
				synctest.Wait()
				if err := o.Close(ctx); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				cancel()
				if err := <-served; err != nil {
					t.Errorf("Serve: %v", err)
				}

				for _, msg := range []string{"owner joined", "owner left", "loss notification"} {
					rs := buf.records(t, msg)
					if len(rs) == 0 {
						t.Errorf("no %q record", msg)
						continue
					}
					if rs[0]["level"] != "INFO" {
						t.Errorf("%q logged at %v, want INFO", msg, rs[0]["level"])
					}
				}
				if rs := buf.records(t, "owner joined"); len(rs) > 0 && rs[0]["owner"] != "a" {
					t.Errorf("owner joined: %v", rs[0])
				}
				changes := buf.records(t, "lease table change")
				if level == slog.LevelInfo {
					if len(changes) != 0 {
						t.Errorf("%d debug records at info level", len(changes))
					}
					return
				}
				granted := false
				for _, r := range changes {
					if r["owner"] == "a" && r["lgn"].(float64) > 0 && r["range"] != "" {
						granted = true
					}
				}
				if !granted {
					t.Errorf("no debug record of the grant to a: %v", changes)
				}
			})
		})
	}
}
