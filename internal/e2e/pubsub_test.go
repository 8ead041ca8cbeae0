package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/pubsub/pubsub"
	"github.com/leasehold/leasehold/protocol"
)

// buildExample compiles one example's command (./examples/NAME) into a
// temporary directory, as build does the kv example.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	if err := goBuild(out, "./examples/"+name); err != nil {
		t.Fatal(err)
	}
	return out
}

// startExampleManager starts leasehold manager with fast timings and returns its
// address.
func startExampleManager(t *testing.T, leasehold string) string {
	t.Helper()
	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	return addr
}

// psEvent is one event of a subscription, stamped when the frontend saw it.
type psEvent struct {
	at time.Time
	pubsub.Event
}

// psLog records the events of one subscription.
type psLog struct {
	topic string
	mu    sync.Mutex
	evs   []psEvent
}

func (l *psLog) add(e pubsub.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, psEvent{time.Now(), e})
	l.mu.Unlock()
}

func (l *psLog) events() []psEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

// lastOwner is the Owner of the last stream opened before t, and whether
// any opened afresh after t.
func (l *psLog) lastOwner(before time.Time) string {
	owner := ""
	for _, e := range l.events() {
		if e.Kind == "subscribed" && e.at.Before(before) {
			owner = e.Owner
		}
	}
	return owner
}

func (l *psLog) freshAfter(t time.Time) (time.Time, bool) {
	for _, e := range l.events() {
		if e.Kind == "subscribed" && e.New && e.at.After(t) {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// psPublished is one acknowledged publish: when it was sent and answered.
type psPublished struct{ start, ack time.Time }

// TestPubSubScenario is the pubsub example's acceptance scenario: a Manager
// and three pubsub servers as real processes; three frontends subscribed
// to 12 topics each; a publisher sending to every topic every 25 ms. One
// server is killed with SIGKILL: every subscription on it is made afresh
// at the topic's new Owner within the notification bound. Another is
// drained with leasehold drain: its subscriptions move with it, and no
// subscriber notices. Throughout, every subscriber receives every message
// published after it was (re)subscribed — in order, once within a
// subscription — and none acknowledged before it asked.
func TestPubSubScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	leasehold, _ := build(t)
	psBin := buildExample(t, "pubsub")
	tm := protocol.Fast()
	started := time.Now()
	addr := startExampleManager(t, leasehold)
	c := &cli{t: t, leasehold: leasehold, manager: addr}
	ids := []string{"ps-1", "ps-2", "ps-3"}
	servers := map[string]*proc{}
	for _, id := range ids {
		servers[id] = startOwner(t, id, psBin, "--manager", addr, "--listen", "127.0.0.1:0", "--id", id)
		servers[id].waitLine(t, "pubsub serving on ", 10*time.Second)
	}
	c.settle("three owners", func(s status) bool { return slices.Equal(s.holders(), ids) })

	const ntopics = 12
	topics := make([]string, ntopics)
	for i := range topics {
		topics[i] = fmt.Sprintf("topic-%02d", i)
	}
	var logs []*psLog
	for f := range 3 {
		cl, err := pubsub.NewClient(context.Background(), pubsub.ClientConfig{CertsDir: certsDirFor(t), Manager: addr, Timing: tm})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for _, topic := range topics {
			l := &psLog{topic: topic}
			logs = append(logs, l)
			cl.Subscribe(topic, fmt.Sprintf("frontend-%d", f), l.add)
		}
	}
	pub, err := pubsub.NewClient(context.Background(), pubsub.ClientConfig{CertsDir: certsDirFor(t), Manager: addr, Timing: tm})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	// The publisher: one sequence per topic, message "topic/i".
	var pmu sync.Mutex
	acked := map[string]psPublished{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, topic := range topics {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(25 * time.Millisecond):
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				data := fmt.Sprintf("%s/%d", topic, i)
				st := time.Now()
				_, err := pub.Publish(ctx, topic, data)
				cancel()
				if err == nil {
					pmu.Lock()
					acked[data] = psPublished{st, time.Now()}
					pmu.Unlock()
				}
			}
		})
	}
	stopPublishing := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopPublishing()
	time.Sleep(2 * time.Second)

	// Kill one server: its subscriptions are made afresh elsewhere.
	dead := "ps-2"
	killedAt := time.Now()
	servers[dead].kill(t)
	bound := killBound(tm) + slack
	var onDead []*psLog
	for _, l := range logs {
		if l.lastOwner(killedAt) == dead {
			onDead = append(onDead, l)
		}
	}
	if len(onDead) == 0 {
		t.Fatalf("no subscription was on %s", dead)
	}
	var worst time.Duration
	var times []time.Duration
	for _, l := range onDead {
		deadline := killedAt.Add(bound)
		for {
			if at, ok := l.freshAfter(killedAt); ok {
				times = append(times, at.Sub(killedAt))
				worst = max(worst, at.Sub(killedAt))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not resubscribed within %s of killing %s", l.topic, bound, dead)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	slices.Sort(times)
	t.Logf("%s: killed %s; its %d subscriptions resubscribed afresh within %s (median %s; bound %s)",
		since(started), dead, len(onDead), worst.Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), bound)
	for _, l := range logs {
		if l.lastOwner(killedAt) != dead {
			if _, ok := l.freshAfter(killedAt); ok {
				t.Errorf("%s: subscription on %s made afresh after %s was killed", l.topic, l.lastOwner(killedAt), dead)
			}
		}
	}
	c.settle("two owners", func(s status) bool { return slices.Equal(s.holders(), []string{"ps-1", "ps-3"}) })
	time.Sleep(time.Second)

	// Drain another: its subscriptions move with its ranges.
	drained := "ps-3"
	drainAt := time.Now()
	if out, err := command(t, leasehold, "drain", drained, "--manager", addr).CombinedOutput(); err != nil {
		t.Fatalf("leasehold drain %s: %v\n%s", drained, err, out)
	}
	c.settle("one owner", func(s status) bool { return slices.Equal(s.holders(), []string{"ps-1"}) })
	t.Logf("%s: drained %s in %s", since(started), drained, time.Since(drainAt).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	stopPublishing()
	time.Sleep(time.Second) // the last messages reach their subscribers
	end := time.Now()

	pmu.Lock()
	defer pmu.Unlock()
	checkPubSub(t, logs, acked, end)
	moved := 0
	for _, l := range logs {
		if l.lastOwner(drainAt) == drained {
			moved++
		}
		if at, ok := l.freshAfter(drainAt); ok {
			t.Errorf("%s: subscription made afresh %s after the drain began: a subscriber noticed the planned move",
				l.topic, at.Sub(drainAt).Round(time.Millisecond))
		}
	}
	if moved == 0 {
		t.Errorf("no subscription was on %s when it drained", drained)
	}
	t.Logf("%s: %d messages acknowledged; %d subscriptions moved with the drain unnoticed", since(started), len(acked), moved)
}

// checkPubSub checks the promise on each subscription's events. A segment
// runs from a stream opened afresh (New) to the last stream end before the
// next: every message published after the segment began and acknowledged
// before it ended was received in it, in publish order, once; and no
// message received was acknowledged before the segment's request was sent.
func checkPubSub(t *testing.T, logs []*psLog, acked map[string]psPublished, end time.Time) {
	t.Helper()
	seq := func(data string) int {
		_, s, _ := strings.Cut(data, "/")
		n, _ := strconv.Atoi(s)
		return n
	}
	missing, required, early, order := 0, 0, 0, 0
	for _, l := range logs {
		evs := l.events()
		type segment struct {
			begin, sent, end time.Time
			got              []string
		}
		var segs []*segment
		var lastEnd time.Time
		for _, e := range evs {
			switch {
			case e.Kind == "subscribed" && e.New:
				if n := len(segs); n > 0 {
					segs[n-1].end = lastEnd
				}
				segs = append(segs, &segment{begin: e.at, sent: e.Sent})
			case e.Kind == "ended":
				lastEnd = e.at
			case e.Kind == "message" && len(segs) > 0:
				s := segs[len(segs)-1]
				s.got = append(s.got, e.Message.Data)
			}
		}
		if len(segs) > 0 {
			segs[len(segs)-1].end = end
		}
		for _, s := range segs {
			got := map[string]bool{}
			prev := -1
			for _, m := range s.got {
				if p, ok := acked[m]; ok && p.ack.Before(s.sent) {
					if early++; early <= 5 {
						t.Errorf("%s: received %s, acknowledged %s before the subscription was asked for", l.topic, m, s.sent.Sub(p.ack))
					}
				}
				if n := seq(m); n <= prev {
					if order++; order <= 5 {
						t.Errorf("%s: received %s after message %d (out of order or twice)", l.topic, m, prev)
					}
				} else {
					prev = n
				}
				got[m] = true
			}
			for m, p := range acked {
				if !strings.HasPrefix(m, l.topic+"/") || !p.start.After(s.begin) || !p.ack.Before(s.end) {
					continue
				}
				required++
				if !got[m] {
					if missing++; missing <= 2 {
						for _, e := range evs {
							if e.Kind != "message" || e.at.Sub(p.ack).Abs() < 300*time.Millisecond {
								t.Logf("  %s %s new=%v owner=%s msg=%s reason=%s", e.at.Format("05.000"), e.Kind, e.New, e.Owner, e.Message.Data, e.Reason)
							}
						}
						t.Logf("  %s psPublished, %s acked", p.start.Format("05.000"), p.ack.Format("05.000"))
						t.Errorf("%s: %s (published %s after the subscription, acknowledged %s before its stream ended) not received",
							l.topic, m, p.start.Sub(s.begin).Round(time.Millisecond), s.end.Sub(p.ack).Round(time.Millisecond))
					}
				}
			}
		}
	}
	t.Logf("checked %d required deliveries: %d missing, %d from before a subscription, %d out of order",
		required, missing, early, order)
}
