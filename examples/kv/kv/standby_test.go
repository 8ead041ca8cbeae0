package kv_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/leasehold/leasehold/examples/kv/kv"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// TestStandbyDataPath runs a Manager with standbys and two kv servers with
// --standbys 1 in two zones, in process: once every range's standby is in
// sync, each put is stored at its standby before it is acknowledged, and
// the servers' metrics count the replicated writes and the fills.
func TestStandbyDataPath(t *testing.T) {
	t.Parallel()
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast(),
		Standbys: map[string]int{protocol.DefaultNamespace: 1}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	defer func() { cancel(); <-done }()
	var servers []*kv.Server
	for i, zone := range []string{"a", "b"} {
		s, err := kv.NewServer(context.Background(), kv.ServerConfig{Insecure: true, Manager: lis.Addr().String(),
			ID: fmt.Sprintf("kv-%d", i+1), Listen: "127.0.0.1:0", Timing: protocol.Fast(), Zone: zone, Standbys: 1})
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
	}
	defer func() {
		cctx, ccancel := context.WithCancel(context.Background())
		ccancel()
		for _, s := range servers {
			_ = s.Close(cctx)
		}
	}()
	waitInSync(t, srv, protocol.DefaultNamespace, 2)

	cl, err := kv.NewClient(context.Background(), kv.ClientConfig{Insecure: true, Manager: lis.Addr().String(),
		Timing: protocol.Fast(), Timeout: opTime})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.WaitSynced(t.Context()); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := cl.Put(t.Context(), fmt.Sprintf("key-%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	var replicated, fills, copies float64
	for _, s := range servers {
		m := scrapeURL(t, &cluster{}, "http://"+s.Addr()+"/metrics") // 127.0.0.1
		v, _ := m.get("kv_standby_replicated_writes_total")
		replicated += v
		f, _ := m.get("kv_standby_fill_seconds_count")
		fills += f
		copies += float64(s.StandbyStats().Copies)
	}
	if replicated < n || fills == 0 || copies < n {
		t.Errorf("after %d puts: %g writes replicated, %g fills, %g values kept as standby; want %d, some, %d",
			n, replicated, fills, copies, n, n)
	}
}
