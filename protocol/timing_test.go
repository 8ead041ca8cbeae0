package protocol

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestProfilesValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    Timing
	}{
		{"Production", Production()},
		{"Fast", Fast()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.t.Validate(); err != nil {
				t.Fatalf("%s().Validate() = %v, want nil", tc.name, err)
			}
		})
	}
}

// TestProductionMatchesPapers pins the profile to the papers' numbers
// (C§2.1.2, C§2.2.1, C§2.3, C§2.3.1), which the rest of the design quotes.
func TestProductionMatchesPapers(t *testing.T) {
	p := Production()
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		{"OwnerLease", p.OwnerLease, 60 * time.Second},
		{"Renew", p.Renew, 15 * time.Second},
		{"ManagerLease", p.ManagerLease, 65 * time.Second},
		{"Sync", p.Sync, 30 * time.Second},
		{"LogRetention", p.LogRetention, 5 * time.Minute},
	} {
		if c.got != c.want {
			t.Errorf("Production().%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestValidateRejects changes one field of a valid profile at a time and
// checks that Validate names the fields of the rule it breaks, in its text
// and in TimingError.Fields, and wraps ErrUnsafeTiming.
func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Timing)
		fields []string // each must appear in the message
	}{
		// Single copy (C§2.3.1).
		{"ManagerLease below OwnerLease×(1+MaxDrift)",
			func(t *Timing) { t.ManagerLease = 2099 * time.Millisecond }, // needs 2.1 s
			[]string{"ManagerLease", "OwnerLease", "MaxDrift"}},
		{"ManagerLease equal to OwnerLease with drift",
			func(t *Timing) { t.ManagerLease = t.OwnerLease },
			[]string{"ManagerLease", "OwnerLease", "MaxDrift"}},
		{"ManagerLease below OwnerLease×(1+MaxDrift), production",
			func(t *Timing) { *t = Production(); t.MaxDrift = 0.1 }, // needs 66 s
			[]string{"ManagerLease", "OwnerLease", "MaxDrift"}},
		// Liveness.
		{"Renew above half of OwnerLease",
			func(t *Timing) { t.Renew = 1001 * time.Millisecond },
			[]string{"Renew", "OwnerLease"}},
		{"BackoffMax equal to Renew",
			func(t *Timing) { t.BackoffMax = t.Renew },
			[]string{"BackoffMax", "Renew"}},
		{"BackoffMax above Renew",
			func(t *Timing) { t.BackoffMax = 2 * t.Renew },
			[]string{"BackoffMax", "Renew"}},
		{"BackoffMin above BackoffMax",
			func(t *Timing) { t.BackoffMin = t.BackoffMax + 1 },
			[]string{"BackoffMin", "BackoffMax"}},
		{"BackoffMin negative",
			func(t *Timing) { t.BackoffMin = -1 },
			[]string{"BackoffMin"}},
		{"SyncTimeout below twice Sync",
			func(t *Timing) { t.SyncTimeout = 2*t.Sync - 1 },
			[]string{"SyncTimeout", "Sync "}},
		{"LogRetention below SyncTimeout",
			func(t *Timing) { t.LogRetention = t.SyncTimeout - 1 },
			[]string{"LogRetention", "SyncTimeout"}},
		{"MaxDrift negative",
			func(t *Timing) { t.MaxDrift = -0.01 },
			[]string{"MaxDrift"}},
		{"MaxDrift one",
			func(t *Timing) { t.MaxDrift = 1 },
			[]string{"MaxDrift"}},
		{"MaxDrift infinite",
			func(t *Timing) { t.MaxDrift = math.Inf(1) },
			[]string{"MaxDrift"}},
		// Zero and negative durations.
		{"OwnerLease zero", func(t *Timing) { t.OwnerLease = 0 }, []string{"OwnerLease"}},
		{"Renew zero", func(t *Timing) { t.Renew = 0 }, []string{"Renew"}},
		{"ManagerLease zero", func(t *Timing) { t.ManagerLease = 0 }, []string{"ManagerLease"}},
		{"Sync zero", func(t *Timing) { t.Sync = 0 }, []string{"Sync"}},
		{"SyncTimeout zero", func(t *Timing) { t.SyncTimeout = 0 }, []string{"SyncTimeout"}},
		{"LogRetention zero", func(t *Timing) { t.LogRetention = 0 }, []string{"LogRetention"}},
		{"BackoffMax zero", func(t *Timing) { t.BackoffMax = 0 }, []string{"BackoffMax"}},
		{"OwnerLease negative", func(t *Timing) { t.OwnerLease = -time.Second }, []string{"OwnerLease"}},
		{"zero Timing", func(t *Timing) { *t = Timing{} }, []string{"OwnerLease"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tm := Fast()
			tc.change(&tm)
			err := tm.Validate()
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want an error", tm)
			}
			if !errors.Is(err, ErrUnsafeTiming) {
				t.Errorf("Validate() = %v, does not wrap ErrUnsafeTiming", err)
			}
			var te *TimingError
			if !errors.As(err, &te) {
				t.Fatalf("Validate() = %v, not a *TimingError", err)
			}
			for _, f := range tc.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("Validate() = %q, does not name %q", err, f)
				}
				if !slices.Contains(te.Fields, strings.TrimSpace(f)) {
					t.Errorf("Validate() names fields %v, not %q", te.Fields, f)
				}
			}
		})
	}
}

// TestValidateAccepts covers the boundaries that are still safe.
func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Timing)
	}{
		{"ManagerLease exactly OwnerLease×(1+MaxDrift)", func(t *Timing) { t.ManagerLease = 2100 * time.Millisecond }},
		{"Renew exactly half of OwnerLease", func(t *Timing) { t.Renew = time.Second }},
		{"SyncTimeout exactly twice Sync", func(t *Timing) { t.SyncTimeout = 2 * t.Sync }},
		{"LogRetention exactly SyncTimeout", func(t *Timing) { t.LogRetention = t.SyncTimeout }},
		{"BackoffMin zero", func(t *Timing) { t.BackoffMin = 0 }},
		{"BackoffMin equal to BackoffMax", func(t *Timing) { t.BackoffMin = t.BackoffMax }},
		{"no drift, equal leases", func(t *Timing) { t.MaxDrift = 0; t.ManagerLease = t.OwnerLease }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tm := Fast()
			tc.change(&tm)
			if err := tm.Validate(); err != nil {
				t.Fatalf("Validate(%+v) = %v, want nil", tm, err)
			}
		})
	}
}

// TestValidateRejectsNaNMaxDrift: a NaN MaxDrift (which
// strconv.ParseFloat("NaN", 64) returns without error) passes the range
// check, because every comparison with NaN is false, and it then disables
// the single-copy check ManagerLease ≥ OwnerLease × (1 + MaxDrift) for the
// same reason. Validate thus accepts a ManagerLease shorter than the
// OwnerLease, which breaks single copy (C§2.3.1), and NotificationBound
// converts NaN to a Duration.
func TestValidateRejectsNaNMaxDrift(t *testing.T) {
	tm := Fast()
	tm.MaxDrift = math.NaN()
	tm.ManagerLease = tm.OwnerLease / 2 // unsafe whatever the drift
	if err := tm.Validate(); err == nil || !errors.Is(err, ErrUnsafeTiming) {
		t.Fatalf("Validate(MaxDrift NaN, ManagerLease %v < OwnerLease %v) = %v, want ErrUnsafeTiming",
			tm.ManagerLease, tm.OwnerLease, err)
	}
}

func TestNotificationBound(t *testing.T) {
	tests := []struct {
		name string
		t    Timing
		want time.Duration
	}{
		{"Production: 75 s × 1.05", Production(), 78750 * time.Millisecond},
		{"Fast: 2.5 s × 1.05", Fast(), 2625 * time.Millisecond},
		{"no drift", Timing{SyncTimeout: 10 * time.Second}, 10 * time.Second},
		{"10% drift", Timing{SyncTimeout: 10 * time.Second, MaxDrift: 0.1}, 11 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.t.NotificationBound()
			// Float arithmetic may be off by a nanosecond.
			if d := got - tc.want; d < -time.Nanosecond || d > time.Nanosecond {
				t.Errorf("NotificationBound() = %v, want %v", got, tc.want)
			}
			if got < tc.t.SyncTimeout {
				t.Errorf("NotificationBound() = %v, below SyncTimeout %v", got, tc.t.SyncTimeout)
			}
		})
	}
}

// TestLivenessWaits pins the liveness rule's waits and checks, for both
// profiles, the bound docs/protocol.md states: an Owner that leaves a
// stalled leader after the answer wait, waits out an election (at most
// twice the server's default election timeout, ten heartbeats of
// min(100 ms, Renew/20)) and renews once more still holds its lease.
func TestLivenessWaits(t *testing.T) {
	for _, tc := range []struct {
		name                string
		t                   Timing
		ownerWait, ownerQ   time.Duration
		lookupWait, lookupQ time.Duration
	}{
		{"Production", Production(), 7500 * time.Millisecond, 22500 * time.Millisecond, 7500 * time.Millisecond, 37500 * time.Millisecond},
		{"Fast", Fast(), 250 * time.Millisecond, 750 * time.Millisecond, 250 * time.Millisecond, 1250 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.t
			for _, c := range []struct {
				name      string
				got, want time.Duration
			}{
				{"OwnerAnswerWait", p.OwnerAnswerWait(), tc.ownerWait},
				{"OwnerQuiet", p.OwnerQuiet(), tc.ownerQ},
				{"LookupAnswerWait", p.LookupAnswerWait(), tc.lookupWait},
				{"LookupQuiet", p.LookupQuiet(), tc.lookupQ},
			} {
				if c.got != c.want {
					t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
				}
			}
			election := 2 * 10 * min(100*time.Millisecond, p.Renew/20)
			if b := p.OwnerAnswerWait() + election + p.Renew; b >= p.OwnerLease {
				t.Errorf("answer wait + election + renewal = %v, not under OwnerLease %v", b, p.OwnerLease)
			}
			if b := p.Sync + 2*p.LookupAnswerWait() + election; b >= p.SyncTimeout {
				t.Errorf("poll + two answer waits + election = %v, not under SyncTimeout %v", b, p.SyncTimeout)
			}
		})
	}
}
