package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The loopback scenario's report: PRS Figures 7 and 8 (the Manager's CPU
// and network against the number of nodes), the p99 of renewals and
// propagation, and a table of every point with and without churn.

func durPct(v []time.Duration, p float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[int(p/100*float64(len(s)-1))]
}

func fmtDur(v []time.Duration, p float64) string {
	if len(v) == 0 {
		return "—"
	}
	return durPct(v, p).Round(100 * time.Microsecond).String()
}

func loopbackReport(plan loopbackPlan, results []loopbackResult) *Report {
	setup := "PRS §7: one Manager on a 2003 2.4 GHz dual Xeon, up to 2,000 frontends + 500 middle-tier (2,500 nodes)"
	wire := "plaintext gRPC"
	if plan.tls {
		wire = "mutual TLS (a throwaway CA; the Manager's replica certificate, one certificate per Owner and per Lookup)"
	}
	conns := "each client with its own TCP connection and gRPC stream"
	if plan.perConn > 1 {
		conns = fmt.Sprintf("each client with its own gRPC stream, each Owner and full Lookup with its own TCP connection, the thin Lookups %d to a connection", plan.perConn)
	}
	mgrs := "one `leasehold manager` process (group of one"
	if plan.replicas > 0 {
		mgrs = fmt.Sprintf("a `leasehold manager` leader serving the Owners and %d read replicas (`--role read-replica`, joined by `cluster add --read-replica`) serving every Lookup, each Lookup given the read replicas' addresses only and spreading over them by rendezvous hashing (a group of one voter", plan.replicas)
	}
	ours := fmt.Sprintf("%s, %s timings, memory only, %s) on 127.0.0.1; a load driver of two processes, one with N real Owners (owner library), the other with M Lookups "+
		"(%d real lookup libraries with a full copy, the rest thin), as servers and frontends run apart, %s; Owners start over %s, then, once each holds leases, Lookups one every %s; "+
		"then a warm-up until every range is owned and every Lookup synced plus two renewals; then a %s window without churn and a %s window with churn "+
		"(an Owner stops every %s, alternately leaving gracefully and crashing, back after %s; a Lookup restarts every %s, back after %s)",
		mgrs, plan.profile, wire, loopbackFull, conns, plan.spread, plan.perLookup, plan.measure, plan.measure,
		(plan.timing.Renew * 2 / 5).Round(time.Millisecond), (plan.timing.Renew * 4 / 3).Round(time.Millisecond),
		(plan.timing.Renew / 10).Round(time.Millisecond), (plan.timing.Renew / 3).Round(time.Millisecond))
	cpu := Figure{Name: "loopback-cpu", Title: "Manager process CPU vs. number of nodes, real sockets (PRS Figure 7)",
		XLabel: "nodes (Owners + Lookups)", YLabel: "Manager CPU (% of one core, user + system)", Points: true, LegendTop: true,
		Paper: "PRS Figure 7: Manager CPU load as frontends and middle-tier servers increase; \"quite small\"",
		Setup: setup, Ours: ours}
	net := Figure{Name: "loopback-network", Title: "Manager network vs. number of nodes, real sockets (PRS Figure 8)",
		XLabel: "nodes (Owners + Lookups)", YLabel: "Manager traffic, sent + received (KB/s of TCP payload)", Points: true, LegendTop: true,
		Paper: "PRS Figure 8: Manager network load as frontends and middle-tier servers increase", Setup: setup, Ours: ours}
	lat := Figure{Name: "loopback-latency", Title: "Renewal round trip and change propagation, p99, real sockets",
		XLabel: "nodes (Owners + Lookups)", YLabel: "p99 (ms)", Points: true, LegendTop: true,
		Paper: "neither paper reports either; our goals: renewal p99 < 100 ms, propagation p99 < 1 s at 1,000 Owners + 4,000 Lookups",
		Setup: "—", Ours: ours}
	table := [][]string{{"owners", "lookups", "churn", "window", "manager CPU", "manager RSS (peak)", "msgs/s", "KB/s",
		"renewals", "renewal p50", "renewal p99", "lease requests", "request p99", "manager answer p99", "changes", "propagation p50", "propagation p99", "propagation max", "not reached",
		"owner stops", "lookup restarts", "client warnings", "driver CPU", "load average", "read replicas", "replica apply p50", "replica apply p99"}}
	for _, churn := range []bool{false, true} {
		var x, yc, yn, yr, yp []float64
		for _, r := range results {
			if r.churn != churn {
				continue
			}
			x = append(x, float64(r.owners+r.lookups))
			yc = append(yc, 100*r.cpu)
			yn = append(yn, r.bytes/1000)
			yr = append(yr, durPct(r.renewals, 99).Seconds()*1000)
			yp = append(yp, durPct(r.propagation, 99).Seconds()*1000)
		}
		if len(x) == 0 {
			continue
		}
		name := churnName(churn)
		cpu.Series = append(cpu.Series, Series{Name: name, X: x, Y: yc})
		net.Series = append(net.Series, Series{Name: name, X: x, Y: yn})
		lat.Series = append(lat.Series, Series{Name: "renewal p99, " + name, X: x, Y: yr})
		if churn {
			lat.Series = append(lat.Series, Series{Name: "propagation p99, " + name, X: x, Y: yp})
		}
	}
	for _, r := range results {
		table = append(table, []string{fmt.Sprint(r.owners), fmt.Sprint(r.lookups), fmt.Sprint(r.churn),
			r.window.Round(time.Second).String(),
			fmt.Sprintf("%.2f%%", 100*r.cpu), fmt.Sprintf("%.0f MB (%.0f MB)", float64(r.rss)/1e6, float64(r.peakRSS)/1e6),
			fmt.Sprintf("%.0f", r.msgs), fmt.Sprintf("%.1f", r.bytes/1000),
			fmt.Sprint(len(r.renewals)), fmtDur(r.renewals, 50), fmtDur(r.renewals, 99),
			fmt.Sprint(len(r.requests)), fmtDur(r.requests, 99), r.answerP99,
			fmt.Sprint(len(r.propagation)), fmtDur(r.propagation, 50), fmtDur(r.propagation, 99), fmtDur(r.propagation, 100),
			fmt.Sprint(r.unreached), fmt.Sprint(r.ownerEvents), fmt.Sprint(r.lookupRes), fmt.Sprint(r.warnings),
			fmt.Sprintf("%.1f%%", 100*r.driverCPU), r.load, fmt.Sprint(plan.replicas), fmtDur(r.replicaLag, 50), fmtDur(r.replicaLag, 99)})
	}
	var perProc []string
	for _, r := range results {
		perProc = append(perProc, fmt.Sprintf("per process at %d/%d %s: %s.", r.owners, r.lookups, churnName(r.churn), procsString(r.procs)))
	}
	// The largest point, for the one-line measurements.
	var big loopbackPoint
	for _, r := range results {
		if r.owners+r.lookups > big.owners+big.lookups {
			big = r.loopbackPoint
		}
	}
	at := fmt.Sprintf("at %d Owners + %d Lookups", big.owners, big.lookups)
	for _, r := range results {
		if r.loopbackPoint != big {
			continue
		}
		sep := func(s string) string {
			if s == "" {
				return at + ": "
			}
			return s + "; "
		}
		cpu.Measured = sep(cpu.Measured) + fmt.Sprintf("%.2f%% of one core %s", 100*r.cpu, churnName(r.churn))
		net.Measured = sep(net.Measured) + fmt.Sprintf("%.1f KB/s, %.0f messages/s %s", r.bytes/1000, r.msgs, churnName(r.churn))
		lat.Measured = sep(lat.Measured) + fmt.Sprintf("renewal p99 %s %s", fmtDur(r.renewals, 99), churnName(r.churn))
		if r.churn {
			lat.Measured += fmt.Sprintf(", propagation p99 %s over %d changes (%d not reached)", fmtDur(r.propagation, 99), len(r.propagation), r.unreached)
		}
	}
	bytesNote := "Bytes and messages are counted on the driver's side of every connection (TCP payload: protobuf, gRPC and HTTP/2 framing, and the TLS records and handshakes when the run has TLS; no IP/TCP headers), both directions; the Manager talks to nobody else."
	if plan.replicas > 0 {
		bytesNote = "Bytes and messages (the table's msgs/s and KB/s, and the network figure) are counted on the driver's side of every connection (TCP payload: protobuf, gRPC and HTTP/2 framing, and the TLS records and handshakes when the run has TLS; no IP/TCP headers), both directions: the leader's Owners and the read replicas' Lookups together; the Raft traffic between the leader and the read replicas is not in them but in each Manager's own bytes in the per-process notes."
	}
	return &Report{
		Figures: []Figure{cpu, net, lat},
		Table:   table,
		Notes: append([]string{
			"Manager CPU is the process's user + system time from /proc/PID/stat over the window (CPU time, not wall time), as a share of one core; RSS from /proc/PID/status at the window's end.",
			bytesNote,
			"A round trip is an Owner's LeaseRequest to the LeaseResponse acknowledging it, timed in the driver (the client side), for every request answered in the window; 'renewal' columns are the steady renewals (held_as_acked, not leaving or draining), 'request' every lease request (joins, drains and goodbyes too, whose answers wait for the Manager's membership round, up to 1 s).",
			"Propagation: for each change with a loss notification that the Manager applied in the window, from the time of its log line (applied, on the machine's clock, millisecond precision) to the moment the last Lookup that had synced before it applied an update reaching its LSN (driver's clock); Lookups stopped before they had it are left out; 'not reached' counts changes some running Lookup still lacked a poll after the window.",
			fmt.Sprintf("Thin Lookups speak the sync protocol on the real gRPC stream by the lookup library's rules, heartbeats included (internal/thinlookup, the simulation's thin Lookup: same requests, saying names_once and their MaxDrift; a poll when the copy they would have is Sync old, which on a healthy stream, with the Manager's heartbeats vouching for it, is every 16 × Sync; same gap repair; every byte of every update is received, but only its header — ID, epoch, timings, the request it vouches for, from, to, snapshot — is read, loopback_skim.go) and keep only their LSN; %d per point are the real lookup library.", loopbackFull),
			"Manager answer p99: the Manager's own histogram leasehold_renewal_answer_seconds (every lease request it accepted, from its arrival to its answer handed to the Owner's stream), read from its metrics listener before and after the window; the bound of the bucket that holds the 99th percentile (buckets 10, 25, 50, 100, 250, 500 ms …). The driver's round trips add the sockets, both processes' scheduling and the driver's own work.",
			"Client warnings are the log records at warn level of the Owners and Lookups in the window: a stream to the Manager that broke (and was reopened), or an Owner that left before all its ranges moved.",
			"The driver's two processes run on the same 2 cores as the Manager (their CPU together is the 'driver CPU' column): latencies include their scheduling.",
			"Replica apply: with read replicas, for each change of the propagation columns, from the leader's log line of its loss notification to the last read replica's log line of the same (each Manager logs one when it applies a change that carries one), on the machine's clock; the rest of the propagation is the read replicas' feed and the sockets to the Lookups.",
			"Per process (the notes below): CPU and RSS from /proc as for the Manager; KB/s is the process's rchar + wchar from /proc/PID/io over the window (every read and write system call: for a Manager, which keeps no data directory here, its client sockets, its Raft peers' and its log); msgs/s, for a Manager, its own gRPC server counters (leasehold_grpc_server_msg_received_total + _sent_total, every method: Owners', Lookups' and Raft's); Lookups, the Lookup streams it serves (leasehold_lookups) at the window's end, and the sync streams opened in the window (leasehold_grpc_server_started_total of Lookups.Watch and Lookups.Sync: a Lookup that reopens its stream, after a break, an answer not received in LookupAnswerWait or a refusal, opens another).",
		}, perProc...),
	}
}

func procsString(ps []procUse) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}
