package manager

import (
	"fmt"
	"net/http"
)

// Readiness is the rule /readyz and leasehold status apply to one
// replica's view of the group: the replica is ready when it knows a leader
// and has applied everything committed, and, if it is the leader, when a
// quorum of voters has been heard from within the last election timeout
// (Raft's CheckQuorum view: a leader that loses its quorum steps down one
// election timeout later, and until then it can commit nothing). A
// replica that is not ready cannot serve Owners (the leader) or may serve
// Lookups a stale table (a follower), so a load balancer should send them
// elsewhere. reason says why in a few words, for the body of /readyz and
// the status output.
func Readiness(ci ClusterInfo) (ready bool, reason string) {
	switch {
	case ci.Leader == 0:
		return false, fmt.Sprintf("no leader known (role %s, term %d)", ci.Role, ci.Term)
	case ci.Role == "leader" && ci.Leader == ci.ID && !ci.Quorum:
		return false, fmt.Sprintf("leader of term %d without a quorum of voters heard from in the last election timeout", ci.Term)
	case ci.Role != "leader" && ci.Role != "follower" && ci.Role != RoleReadReplica:
		return false, fmt.Sprintf("%s in term %d", ci.Role, ci.Term)
	case ci.Role == RoleReadReplica && !ci.Serving:
		// A learner never times its leader out (it cannot campaign),
		// so knowing one proves nothing: the proof of rule 17 does.
		return false, fmt.Sprintf("read replica with no proof from leader %d within an election timeout: it refuses Lookups", ci.Leader)
	case ci.Applied < ci.Commit:
		return false, fmt.Sprintf("applied %d of %d committed entries", ci.Applied, ci.Commit)
	case ci.Role == "leader":
		return true, fmt.Sprintf("leader of term %d with a quorum, applied %d", ci.Term, ci.Applied)
	}
	return true, fmt.Sprintf("%s of leader %d in term %d, applied %d of %d", ci.Role, ci.Leader, ci.Term, ci.Applied, ci.Commit)
}

// Ready applies Readiness to the replica's last published view (at most
// publishEvery old); it is false until Run has started.
func (s *Server) Ready() (bool, string) {
	select {
	case <-s.ready:
	default:
		return false, "starting"
	}
	select {
	case <-s.stopped:
		return false, "stopped"
	default:
	}
	return Readiness(s.Snapshot().Cluster)
}

// HandleHealth adds the health endpoints to mux: /healthz answers 200 while
// the process is live (its loop has not stopped), /readyz answers 200 when
// Ready says so and 503 otherwise, the reason in the body either way. The
// CLI serves them on the metrics listener.
func (s *Server) HandleHealth(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		select {
		case <-s.stopped:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "stopped")
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, why := s.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", why)
			return
		}
		fmt.Fprintln(w, "ready:", why)
	})
}
