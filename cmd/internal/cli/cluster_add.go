package cli

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/leasehold/leasehold/internal/client"
)

// resolveWait bounds the check that a new replica's host name resolves.
const resolveWait = 3 * time.Second

// checkResolves refuses, at once, an address whose host is a name that does
// not resolve from here: the leader could not reach it either, and would
// only say so when the --learner-timeout runs out. An IP address, and a
// gRPC target (dns:///…), pass as they are.
func checkResolves(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || net.ParseIP(host) != nil {
		return nil // a gRPC target, or a form CheckAddr accepted
	}
	ctx, cancel := context.WithTimeout(ctx, resolveWait)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
		return fmt.Errorf("ADDR %q: host %q does not resolve here (%v); if only the replicas can resolve it, pass --check-addr=false", addr, host, err)
	}
	return nil
}

// progressEvery is how often cluster add says what it is waiting for.
const progressEvery = 3 * time.Second

// addProgress says on stderr that cluster add is under way, and then every
// progressEvery what it waits for: replica id's log position as the leader
// sees it (a learner catching up), until the returned stop is called.
func (o *clientOptions) addProgress(ctx context.Context, e *env, id uint64, addr string, readReplica bool) (stop func()) {
	if readReplica {
		fmt.Fprintf(e.stderr, "cluster add: asking the leader to add replica %d at %s as a read replica; it joins as a learner and is never promoted (the leader removes it again if it has not caught up within its --learner-timeout, 30s by default)\n", id, addr)
	} else {
		fmt.Fprintf(e.stderr, "cluster add: asking the leader to add replica %d at %s; it joins as a learner and is promoted once caught up (the leader's --learner-timeout, 30s by default)\n", id, addr)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			fmt.Fprintf(e.stderr, "cluster add: %s: %s\n", time.Since(start).Round(time.Second), o.learnerState(ctx, id))
		}
	}()
	return func() { cancel(); <-done }
}

// learnerState says where replica id stands, as the leader sees it.
func (o *clientOptions) learnerState(ctx context.Context, id uint64) string {
	oo := *o
	oo.timeout = min(o.timeout, time.Second)
	resp, err := oo.status(ctx, "")
	if err != nil {
		return "waiting (" + reachError(err) + ")"
	}
	c := resp.GetCluster()
	if c.GetRole() != "leader" && c.GetLeaderAddr() != "" {
		if addrs, _ := client.SplitManagers(c.GetLeaderAddr()); len(addrs) == 1 {
			oo.manager = addrs[0]
			if r, err := oo.status(ctx, ""); err == nil {
				c = r.GetCluster()
			}
		}
	}
	for _, p := range c.GetPeers() {
		if p.GetId() != id {
			continue
		}
		if p.GetVoter() {
			return fmt.Sprintf("replica %d is a voter now; waiting for the promotion to apply", id)
		}
		if p.GetReadReplica() && c.GetRole() == "leader" {
			return fmt.Sprintf("replica %d is a read replica, its log at %d of the leader's %d", id, p.GetMatch(), c.GetCommit())
		}
		if c.GetRole() != "leader" {
			return fmt.Sprintf("replica %d is a learner", id)
		}
		return fmt.Sprintf("replica %d is a learner, its log at %d of the leader's %d", id, p.GetMatch(), c.GetCommit())
	}
	return fmt.Sprintf("waiting for the leader to add replica %d", id)
}
