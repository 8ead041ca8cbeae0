package client

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/protocol"
)

// step is one stream ending and what the follower must do next.
type step struct {
	worked   bool
	refused  bool // a NotLeader refusal; implied by a hint
	hint     string
	next     string
	waits    bool // a backoff wait before next
	followed bool
	relay    bool // next is asked to relay
}

func runSteps(t *testing.T, addrs []string, steps []step) {
	t.Helper()
	runStepsOn(t, newFollower(addrs), steps)
}

func runStepsOn(t *testing.T, f *follower, steps []step) {
	t.Helper()
	for i, s := range steps {
		next, wait, followed := f.ended(s.worked, s.refused || s.hint != "", s.hint)
		if next != s.next || (wait > 0) != s.waits || followed != s.followed || f.relay != s.relay {
			t.Fatalf("step %d (worked %v, hint %q): next %s, wait %s, followed %v, relay %v; want %s, waits %v, followed %v, relay %v",
				i, s.worked, s.hint, next, wait, followed, f.relay, s.next, s.waits, s.followed, s.relay)
		}
		if wait > f.b.Max {
			t.Fatalf("step %d: wait %s beyond the cap %s", i, wait, f.b.Max)
		}
	}
}

// TestFollowerFollowsHintAtOnce: a refusal naming the leader sends the next
// attempt there with no wait, even to an address not in the list, and even
// with one address, where any other failure waits.
func TestFollowerFollowsHintAtOnce(t *testing.T) {
	runSteps(t, []string{"a:1"}, []step{
		{hint: "b:2", next: "b:2", followed: true}, // the leader, off the list: a grown group
		{worked: true, next: "a:1", waits: true},   // it crashed; one address: a full round
		{hint: "c:3", next: "c:3", followed: true}, // a names the new leader
		{worked: true, hint: "a:1", next: "a:1", followed: true},
	})
}

// TestFollowerRotatesThenWaits: without a hint the next address is tried at
// once; the backoff comes only after every address failed in a row.
func TestFollowerRotatesThenWaits(t *testing.T) {
	runSteps(t, []string{"a:1", "b:2", "c:3"}, []step{
		{next: "b:2"},
		{next: "c:3"},
		{next: "a:1", waits: true}, // a full round failed
		{next: "b:2"},
		{next: "c:3"},
		{next: "a:1", waits: true},
		{worked: true, next: "b:2"}, // a worked, then ended: a new round
		{next: "c:3"},
		{next: "a:1", waits: true},
	})
}

// TestFollowerHintResumesRotation: after a hint into the list, rotation
// goes on from the hinted address; a replica naming itself is no hint.
func TestFollowerHintResumesRotation(t *testing.T) {
	runSteps(t, []string{"a:1", "b:2", "c:3"}, []step{
		{hint: "c:3", next: "c:3", followed: true},
		{next: "a:1"},
		{hint: "a:1", next: "b:2", waits: true}, // a names itself: rotation, third failure
		{hint: "d:4", next: "d:4", followed: true},
		{next: "c:3"}, // d is down: on from b
	})
}

// TestFollowerRelaysAroundASilentLeader: a refusal naming a leader whose
// own stream just went unanswered is not followed back to it: the refusing
// replica is asked to relay (once), and without relays, or when the relay
// fails, the next address is tried. A leader that refuses a stream is
// reachable again, and followed as before.
func TestFollowerRelaysAroundASilentLeader(t *testing.T) {
	relaying := newFollower([]string{"a:1", "b:2", "c:3"})
	relaying.relays = true
	runStepsOn(t, relaying, []step{
		{worked: true, next: "b:2"},                              // a stopped answering: the answer deadline
		{hint: "a:1", next: "b:2", followed: true, relay: true},  // b names a: b relays
		{worked: true, hint: "c:3", next: "c:3", followed: true}, // relayed until a stepped down for c
		{next: "a:1"}, // c broke
		{hint: "c:3", next: "a:1", followed: true, relay: true}, // a names c, silent: a relays
		{next: "b:2", waits: true},                              // the relay got nothing; a full round
		{hint: "c:3", next: "b:2", followed: true, relay: true}, // b names c too: b relays
		{next: "c:3"}, // nothing again: on to c itself
		{hint: "b:2", next: "b:2", followed: true}, // c refuses: reachable, followed
	})
	runSteps(t, []string{"a:1", "b:2", "c:3"}, []step{
		{worked: true, next: "b:2"},
		{hint: "a:1", next: "c:3"}, // no relays: on to the next address
		{hint: "a:1", next: "a:1", waits: true},
		{hint: "b:2", next: "b:2", followed: true}, // a refused: reachable, followed
	})
}

// TestFollowerBoundsHops: replicas that name each other (a stale leader and
// the new one) cost a wait after a bounded number of hops.
func TestFollowerBoundsHops(t *testing.T) {
	for _, addrs := range [][]string{{"a:1"}, {"a:1", "b:2", "c:3"}} {
		f := newFollower(addrs)
		hops := 0
		for {
			hint := "b:2"
			if f.cur == "b:2" {
				hint = "a:1"
			}
			_, wait, followed := f.ended(false, true, hint)
			if !followed {
				t.Fatalf("%v: a hint was not followed", addrs)
			}
			if wait > 0 {
				break
			}
			if hops++; hops > 10 {
				t.Fatalf("%v: %d hops without a wait", addrs, hops)
			}
		}
		if hops != f.maxHops() {
			t.Errorf("%v: waited after %d hops, want %d", addrs, hops, f.maxHops())
		}
	}
}

// TestFollowerBackoffGrowsAndResets: waits double up to the cap across
// failed rounds and start over after a working stream.
func TestFollowerBackoffGrowsAndResets(t *testing.T) {
	f := newFollower([]string{"a:1"})
	var waits []time.Duration
	for range 8 {
		_, w, _ := f.ended(false, false, "")
		waits = append(waits, w)
	}
	if waits[0] < f.b.Min/2 || waits[0] > f.b.Min {
		t.Errorf("first wait %s, want within [%s, %s]", waits[0], f.b.Min/2, f.b.Min)
	}
	if last := waits[len(waits)-1]; last < f.b.Max/2 || last > f.b.Max {
		t.Errorf("waits %v: the last is not at the cap %s", waits, f.b.Max)
	}
	if _, w, _ := f.ended(true, false, ""); w > f.b.Min {
		t.Errorf("after a working stream the wait is %s, want at most %s", w, f.b.Min)
	}
}

func TestCheckAddr(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:7400", "manager-1.example:7400", "[::1]:7400", ":7400",
		"dns:///manager.example:7400", "passthrough:///bufnet", "unix:///tmp/leasehold.sock"} {
		if err := CheckAddr(ok); err != nil {
			t.Errorf("CheckAddr(%q): %v", ok, err)
		}
	}
	for addr, want := range map[string]string{
		"":                `an empty address`,
		"localhost":       `address "localhost" is not host:port`,
		"10.0.0.1":        `address "10.0.0.1" is not host:port`,
		"a:1,b:2":         `address "a:1,b:2" is not host:port`,
		"::1:7400":        `address "::1:7400" is not host:port`,
		"host:http":       `address "host:http" is not host:port: port "http" is not a number from 1 to 65535`,
		"host:0":          `port "0"`,
		"host:70000":      `port "70000"`,
		"my host:1":       `address "my host:1" contains a space`,
		"bogus:///thing":  `address "bogus:///thing" is not host:port`,
		"http://host:80/": `is not host:port`,
	} {
		err := CheckAddr(addr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckAddr(%q) = %v, want %q", addr, err, want)
		}
	}
}

func TestSplitManagers(t *testing.T) {
	for list, want := range map[string][]string{
		"":                          nil,
		"  ":                        nil,
		"a:1":                       {"a:1"},
		" a:1 , b:2,c:3 ":           {"a:1", "b:2", "c:3"},
		"a:1,b:2,a:1,b:2":           {"a:1", "b:2"},
		"[::1]:7400,127.0.0.1:7400": {"[::1]:7400", "127.0.0.1:7400"},
	} {
		got, err := SplitManagers(list)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("SplitManagers(%q) = %q, %v; want %q", list, got, err, want)
		}
	}
	for list, want := range map[string]string{
		"a:1,,b:2": `an empty address in "a:1,,b:2"`,
		"a:1,":     `an empty address in "a:1,"`,
		"a:1,b":    `address "b" is not host:port`,
		"a:1;b:2":  `address "a:1;b:2" is not host:port`,
	} {
		if _, err := SplitManagers(list); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SplitManagers(%q): %v, want %q", list, err, want)
		}
	}
}

// TestNormalizeMergesManagers: Manager and Managers merge in order without
// repeats, and an error names the package, the field and the bad entry,
// in a *leasehold.ConfigError.
func TestNormalizeMergesManagers(t *testing.T) {
	normalize := func(manager string, managers []string) (string, []string, error) {
		c := leasehold.Connection{Manager: manager, Managers: managers}
		err := Normalize("owner", &c)
		return c.Manager, c.Managers, err
	}
	m, ms, err := normalize(" a:1, b:2,a:1", []string{"c:3", "b:2 "})
	if err != nil || m != "a:1,b:2,c:3" || !slices.Equal(ms, []string{"a:1", "b:2", "c:3"}) {
		t.Errorf("Normalize: Manager %q, Managers %q, %v; want a:1,b:2,c:3 both ways", m, ms, err)
	}
	if m, ms, err := normalize("", []string{"c:3"}); err != nil || m != "c:3" || len(ms) != 1 {
		t.Errorf("Normalize with Managers alone: %q, %q, %v", m, ms, err)
	}
	for _, tc := range []struct {
		manager  string
		managers []string
		field    string
		want     string
	}{
		{"", nil, "Manager", "owner: Config.Manager (the Manager's address, or a comma-separated list of its replicas' addresses) is required"},
		{" ", []string{}, "Manager", "owner: Config.Manager (the Manager's address"},
		{"a:1,,b:2", nil, "Manager", `owner: Config.Manager: an empty address in "a:1,,b:2"`},
		{"a:1,manager", nil, "Manager", `owner: Config.Manager: address "manager" is not host:port`},
		{"a:1", []string{"b:2", ""}, "Managers[1]", "owner: Config.Managers[1]: an empty address"},
		{"a:1", []string{"b:2,c:3"}, "Managers[0]", `owner: Config.Managers[0]: address "b:2,c:3" is not host:port`},
	} {
		_, _, err := normalize(tc.manager, tc.managers)
		var ce *leasehold.ConfigError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ce) || ce.Package != "owner" || ce.Field != tc.field {
			t.Errorf("Normalize(%q, %q): %v (%#v); want %q on field %s", tc.manager, tc.managers, err, ce, tc.want, tc.field)
		}
	}
	// The defaults.
	c := leasehold.Connection{Manager: "a:1,a:1"}
	if err := Normalize("lookup", &c); err != nil || c.Manager != "a:1" || c.Namespace != "default" || c.Timing != protocol.Production() || c.Logger == nil {
		t.Errorf("Normalize: %+v, %v; want one address and the defaults", c, err)
	}
}
