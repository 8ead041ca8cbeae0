package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		raw  bool
		want keyspace.Key
		ok   bool
	}{
		{"alice", false, keyspace.KeyOf("alice"), true},
		{"0x10", false, keyspace.KeyOf("0x10"), true},
		{"16", true, 16, true},
		{"0x10", true, 16, true},
		{"0XfF", true, 255, true},
		{"010", true, 10, true}, // decimal, never octal
		{"18446744073709551615", true, keyspace.MaxKey, true},
		{"0xffffffffffffffff", true, keyspace.MaxKey, true},
		{"18446744073709551616", true, 0, false},
		{"0x1_0", true, 0, false},
		{"-1", true, 0, false},
		{"0b1", true, 0, false},
		{"", true, 0, false},
		{"0x", true, 0, false},
	} {
		got, err := parseKey(tc.arg, tc.raw)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseKey(%q, %v) = %v, %v; want %v, ok %v", tc.arg, tc.raw, got, err, tc.want, tc.ok)
		}
	}
}

// TestTimingFlagsNamed checks an unsafe result names every flag involved,
// with its value.
func TestTimingFlagsNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--owner-lease", "70s", "--manager-lease", "70s"}, "--owner-lease 1m10s, --manager-lease 1m10s are unsafe: ManagerLease (1m10s) must be at least OwnerLease (1m10s)"},
		{[]string{"--max-drift", "0.2"}, "--max-drift 0.2 is unsafe: ManagerLease (1m5s) must be at least OwnerLease (1m0s) × (1 + MaxDrift 0.2)"},
		{[]string{"--sync-timeout", "1m", "--log-retention", "50s"}, "--sync-timeout 1m0s, --log-retention 50s are unsafe: LogRetention (50s) must be at least SyncTimeout (1m0s)"},
		{[]string{"--sync-timeout", "50s"}, "--sync-timeout 50s is unsafe: SyncTimeout (50s) must be at least twice Sync (30s)"},
		{[]string{"--log-retention", "50s"}, "--log-retention 50s is unsafe: LogRetention (50s) must be at least SyncTimeout (1m15s)"},
	} {
		o := &managerOptions{}
		if err := o.command(&env{getenv: func(string) string { return "" }}).ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		_, err := o.config(nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to start with %q", tc.args, err, tc.want)
		}
	}
}

func TestWatchPrinter(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	half := keyspace.Key(1 << 63)
	owned := leasetable.Entry{Owner: "kv-1", Addr: "127.0.0.1:8001", LGN: 7}
	snap := lookup.Update{Epoch: 9, Update: leasetable.Update{To: 3, Snapshot: true, Segments: []leasetable.Segment{
		{Range: keyspace.Range{Start: 0, End: half}, Entry: owned},
		{Range: keyspace.Range{Start: half, End: 0}},
	}}}
	delta := lookup.Update{Epoch: 9, Update: leasetable.Update{From: 2, To: 5, Changes: []leasetable.Change{
		{LSN: 3, Range: keyspace.Range{Start: 0, End: half}, Entry: owned}, // already printed: skipped
		{LSN: 4, Range: keyspace.Range{Start: half, End: 0}, Entry: leasetable.Entry{Owner: "kv-2", Addr: "b:2", LGN: 8, Migrated: true}},
		{LSN: 5, Range: keyspace.Range{Start: 0, End: half}},
	}}}
	loss := lookup.Loss{Ranges: []keyspace.Range{{Start: 0, End: half}},
		Owners: []leasetable.OwnerRanges{{Owner: "kv-1", Addr: "a:1", Ranges: []keyspace.Range{{Start: 0, End: half}}}}}
	all := lookup.Loss{Ranges: []keyspace.Range{keyspace.Full}, All: true}

	for _, tc := range []struct {
		json bool
		want string
	}{
		{false, `03:04:05.006 snapshot epoch 9 lsn 3: 2 ranges, 1 free, 1 owner
03:04:05.006 change lsn 4 [0x8000000000000000, 0x10000000000000000) -> kv-2 at b:2 (lgn 8) migrated
03:04:05.006 change lsn 5 [0x0000000000000000, 0x8000000000000000) -> free
03:04:05.006 LOSS 1 range held by kv-1: [0x0000000000000000, 0x8000000000000000)
03:04:05.006 LOSS all ranges: no sync with the manager within its sync timeout
`},
		{true, `{"event":"snapshot","time":"2026-01-02T03:04:05.006Z","epoch":9,"lsn":3,"ranges":2,"free_ranges":1,"owners":1}
{"event":"change","time":"2026-01-02T03:04:05.006Z","epoch":9,"lsn":4,"start":"0x8000000000000000","end":"0x10000000000000000","owner":"kv-2","addr":"b:2","lgn":8,"migrated":true}
{"event":"change","time":"2026-01-02T03:04:05.006Z","epoch":9,"lsn":5,"start":"0x0000000000000000","end":"0x8000000000000000","owner":"","addr":"","lgn":0,"migrated":false}
{"event":"loss","id":1,"namespace":"default","at":"2026-01-02T03:04:05.006Z","all":false,"ranges":[{"start":"0x0000000000000000","end":"0x8000000000000000"}],"owners":[{"owner":"kv-1","addr":"a:1","ranges":[{"start":"0x0000000000000000","end":"0x8000000000000000"}]}],"time":"2026-01-02T03:04:05.006Z"}
{"event":"loss","id":2,"namespace":"default","at":"2026-01-02T03:04:05.006Z","all":true,"ranges":[{"start":"0x0000000000000000","end":"0x10000000000000000"}],"owners":[],"time":"2026-01-02T03:04:05.006Z"}
`},
	} {
		var out bytes.Buffer
		p := &watchPrinter{w: &out, json: tc.json, now: func() time.Time { return at }, ns: "default"}
		p.update(snap)
		p.first(9, nil) // an upcall printed the first copy already: nothing
		p.update(delta)
		p.loss(loss)
		p.loss(all)
		if out.String() != tc.want {
			t.Errorf("json %v: printed\n%s\nwant\n%s", tc.json, out.String(), tc.want)
		}
	}

	// An empty table makes no upcall; first says what the copy holds.
	var out bytes.Buffer
	p := &watchPrinter{w: &out, json: true, now: func() time.Time { return at }}
	p.first(9, []leasetable.Segment{{Range: keyspace.Full}})
	if want := `{"event":"snapshot","time":"2026-01-02T03:04:05.006Z","epoch":9,"lsn":0,"ranges":1,"free_ranges":1,"owners":0}` + "\n"; out.String() != want {
		t.Errorf("first copy: printed %s, want %s", out.String(), want)
	}
}

// TestManagerSettingFlags: the settings' flags reach the server's
// configuration, and a setting the server refuses is bad usage naming its
// flag (from the leasehold.ConfigError, not from the error's text).
func TestManagerSettingFlags(t *testing.T) {
	o := &managerOptions{}
	args := []string{"--membership-every", "2s", "--push-every", "-1ns", "--raft-tick", "10ms", "--election-ticks", "20",
		"--snapshot-entries", "500", "--max-request-rate", "7", "--max-message-bytes", "1024"}
	if err := o.command(&env{getenv: func(string) string { return "" }}).ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MembershipEvery != 2*time.Second || cfg.PushEvery != -1 || cfg.RaftTick != 10*time.Millisecond || cfg.ElectionTicks != 20 ||
		cfg.SnapshotEntries != 500 || cfg.MaxRequestRate != 7 || cfg.MaxMessageBytes != 1024 {
		t.Errorf("%v gave %+v", args, cfg)
	}

	o = &managerOptions{}
	if err := o.command(&env{getenv: func(string) string { return "" }}).ParseFlags([]string{"--namespace", strings.Repeat("n", 5000)}); err != nil {
		t.Fatal(err)
	}
	_, err = o.config(nil)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.HasPrefix(err.Error(), "--namespace: invalid namespace name") {
		t.Errorf("a namespace name too long: %v, want a usage error naming --namespace", err)
	}
}

// TestManagerAdvertisesWhatItListensOn: --listen is advertised as it is,
// unless its port is 0, which the listener replaces (the server then
// advertises its listener's address). A wildcard host with no --advertise
// (or --peers entry) is refused: it was advertised as [::]:7400, which no
// other replica or client can dial.
func TestManagerAdvertisesWhatItListensOn(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // the advertised address, or the start of the refusal
	}{
		{[]string{"--listen", "127.0.0.1:7400"}, "127.0.0.1:7400"},
		{[]string{"--listen", "127.0.0.1:0"}, ""},
		{[]string{"--listen", ":7400"}, "--listen :7400 serves every interface"},
		{[]string{"--listen", "0.0.0.0:7400"}, "--listen 0.0.0.0:7400 serves every interface"},
		{[]string{"--listen", "[::]:7400"}, "--listen [::]:7400 serves every interface"},
		{[]string{"--listen", "0.0.0.0:7400", "--advertise", "m-0.m.ns.svc:7400"}, "m-0.m.ns.svc:7400"},
		{[]string{"--listen", "0.0.0.0:7400", "--id", "2", "--peers", "1=a:7400,2=b:7400"}, "b:7400"},
		{[]string{"--listen", "127.0.0.1:7400", "--advertise", "0.0.0.0:7400"}, "--advertise 0.0.0.0:7400 is a wildcard"},
	} {
		o := &managerOptions{}
		if err := o.command(&env{getenv: func(string) string { return "" }}).ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.config(nil)
		if strings.HasPrefix(c.want, "--") {
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("%v: %v (advertising %q), want a usage error starting %q", c.args, err, cfg.Advertise, c.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if cfg.Advertise != c.want {
			t.Errorf("%v advertises %q, want %q", c.args, cfg.Advertise, c.want)
		}
	}
}
