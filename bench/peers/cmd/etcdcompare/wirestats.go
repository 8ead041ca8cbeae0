package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"text/tabwriter"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// wireStats counts, with -wirestats, what leasehold's Lookups send and
// receive on their sync streams, message by message as gRPC hands them
// over (a stats.Handler on their connections): polls, answers, pushes and
// the changes they carry. Each message costs its protobuf bytes, gRPC's
// 5-byte prefix and an HTTP/2 DATA frame header of 9 bytes; what the proxy
// counts beyond that is HTTP/2's own frames (headers, window updates,
// pings, settings).
type wireStats struct {
	mu      sync.Mutex
	on      bool
	classes map[string]*wireClass
}

type wireClass struct {
	msgs, proto, changes int64
}

func (w *wireStats) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(w)}
}

func (w *wireStats) start() {
	w.mu.Lock()
	w.on, w.classes = true, map[string]*wireClass{}
	w.mu.Unlock()
}

// stop ends the window and returns what it counted.
func (w *wireStats) stop() map[string]*wireClass {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on = false
	return w.classes
}

func (w *wireStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (w *wireStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w *wireStats) HandleConn(context.Context, stats.ConnStats)                       {}

func (w *wireStats) HandleRPC(_ context.Context, s stats.RPCStats) {
	var class string
	var size, changes int
	switch p := s.(type) {
	case *stats.OutPayload:
		if _, ok := p.Payload.(*pb.SyncRequest); !ok {
			return
		}
		class, size = "poll (request)", p.Length
	case *stats.InPayload:
		m, ok := p.Payload.(*pb.SyncResponse)
		if !ok {
			return
		}
		size = p.Length
		u := m.GetUpdate()
		changes = len(u.GetChanges()) + len(u.GetCompact().GetKinds())
		switch {
		case u.GetSnapshot():
			class = "snapshot"
		case m.GetId() != 0 && changes == 0:
			class = "answer, no change"
		case m.GetId() != 0:
			class = "answer with changes"
		case u.GetCompact() != nil:
			class = "push, compact"
		default:
			class = "push, full form"
		}
	default:
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.on {
		return
	}
	c := w.classes[class]
	if c == nil {
		c = &wireClass{}
		w.classes[class] = c
	}
	c.msgs++
	c.proto += int64(size)
	c.changes += int64(changes)
}

// print writes the breakdown per lookup-hour, beside total, the bytes the
// proxies counted.
func (w *wireStats) print(classes map[string]*wireClass, lookupHours float64, total int64) {
	names := make([]string, 0, len(classes))
	for n := range classes {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "leasehold lookup messages, per lookup-hour\tmessages\tprotobuf B\t+ framing B\tchanges\tB per change\t")
	var framed int64
	for _, n := range names {
		c := classes[n]
		f := c.proto + 14*c.msgs
		framed += f
		per := "-"
		if c.changes > 0 {
			per = fmt.Sprintf("%.1f", float64(c.proto)/float64(c.changes))
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t\n", n, float64(c.msgs)/lookupHours, float64(c.proto)/lookupHours,
			float64(f)/lookupHours, float64(c.changes)/lookupHours, per)
	}
	fmt.Fprintf(tw, "HTTP/2's own frames (the rest)\t\t\t%.0f\t\t\t\n", float64(total-framed)/lookupHours)
	fmt.Fprintf(tw, "total (proxies)\t\t\t%.0f\t\t\t\n", float64(total)/lookupHours)
	tw.Flush()
}
