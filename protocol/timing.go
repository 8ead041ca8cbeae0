package protocol

import (
	"errors"
	"fmt"
	"time"
)

// Timing holds every timer of the protocol. The values must satisfy
// Validate: the single-copy guarantee rests on ManagerLease ≥ OwnerLease ×
// (1 + MaxDrift).
type Timing struct {
	// OwnerLease is how long an Owner believes a lease after it sent the
	// request that the granting response answers, on its own clock
	// (C§2.3.1). Production: 60 s.
	OwnerLease time.Duration
	// Renew is how often an Owner sends a LeaseRequest. Three consecutive
	// requests must be lost before a lease lapses spuriously. Production: 15 s.
	Renew time.Duration
	// ManagerLease is how long the Manager reserves a range after it sends a
	// response that grants or renews it, on its own clock (C§2.3.1).
	// Production: 65 s.
	ManagerLease time.Duration
	// MaxDrift bounds clock rates: while one node's clock advances by d,
	// another's advances by at most d × (1 + MaxDrift). Clocks need not be
	// synchronized, only their rates bounded. Production: 0.05.
	MaxDrift float64
	// Sync is how often a Lookup asks the Manager for changes even when
	// pushes arrive (C§2.2.1: 30 s). Pushes make propagation immediate; the
	// poll is the safety net.
	Sync time.Duration
	// SyncTimeout is how stale a Lookup's copy may become: a Lookup that has
	// applied no answer to a request sent within SyncTimeout raises loss
	// notifications on all ranges (P§2.1), and again every SyncTimeout while
	// it stays cut off. It bounds recovery notification. Production: 75 s.
	SyncTimeout time.Duration
	// LogRetention is how long the change log keeps an entry (C§2.1.2:
	// 5 min). A Lookup further behind gets a snapshot.
	LogRetention time.Duration
	// BackoffMin and BackoffMax bound the random wait before resending after
	// a message race was detected (C§2.3.2, Figure 7).
	BackoffMin, BackoffMax time.Duration
}

// Production is the profile of the papers: 60 s owner leases renewed every
// 15 s, 65 s manager leases, a 30 s lookup sync and 5 minutes of change log.
func Production() Timing {
	return Timing{
		OwnerLease:   60 * time.Second,
		Renew:        15 * time.Second,
		ManagerLease: 65 * time.Second,
		MaxDrift:     0.05,
		Sync:         30 * time.Second,
		SyncTimeout:  75 * time.Second,
		LogRetention: 5 * time.Minute,
		BackoffMin:   50 * time.Millisecond,
		BackoffMax:   500 * time.Millisecond,
	}
}

// Fast is Production scaled down 30× for tests and demos: leases of 2 s.
func Fast() Timing {
	return Timing{
		OwnerLease:   2 * time.Second,
		Renew:        500 * time.Millisecond,
		ManagerLease: 2200 * time.Millisecond,
		MaxDrift:     0.05,
		Sync:         1 * time.Second,
		SyncTimeout:  2500 * time.Millisecond,
		LogRetention: 10 * time.Second,
		BackoffMin:   5 * time.Millisecond,
		BackoffMax:   50 * time.Millisecond,
	}
}

// ErrUnsafeTiming is wrapped by every error Validate returns.
var ErrUnsafeTiming = errors.New("protocol: unsafe timing")

// A TimingError is a Timing that Validate refuses. Fields names the fields
// the broken rule involves, the one it constrains first; Why states the
// rule with their values. It wraps ErrUnsafeTiming.
type TimingError struct {
	Fields []string
	Why    string
}

func (e *TimingError) Error() string { return ErrUnsafeTiming.Error() + ": " + e.Why }

func (e *TimingError) Unwrap() error { return ErrUnsafeTiming }

// Validate rejects timings that would break a guarantee or thrash, with a
// *TimingError that names the fields and values involved.
func (t Timing) Validate() error {
	bad := func(fields []string, format string, args ...any) error {
		return &TimingError{Fields: fields, Why: fmt.Sprintf(format, args...)}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"OwnerLease", t.OwnerLease}, {"Renew", t.Renew}, {"ManagerLease", t.ManagerLease},
		{"Sync", t.Sync}, {"SyncTimeout", t.SyncTimeout}, {"LogRetention", t.LogRetention},
		{"BackoffMax", t.BackoffMax},
	} {
		if f.d <= 0 {
			return bad([]string{f.name}, "%s (%s) must be positive", f.name, f.d)
		}
	}
	if !(t.MaxDrift >= 0 && t.MaxDrift < 1) { // also rejects NaN, which compares false to everything
		return bad([]string{"MaxDrift"}, "MaxDrift (%g) must be in [0, 1)", t.MaxDrift)
	}
	// Single copy (C§2.3.1): the Owner's timer starts before the Manager's,
	// and OwnerLease on the slowest clock must end before ManagerLease on
	// the fastest one.
	if float64(t.ManagerLease) < float64(t.OwnerLease)*(1+t.MaxDrift) {
		return bad([]string{"ManagerLease", "OwnerLease", "MaxDrift"}, "ManagerLease (%s) must be at least OwnerLease (%s) × (1 + MaxDrift %g) = %s",
			t.ManagerLease, t.OwnerLease, t.MaxDrift,
			time.Duration(float64(t.OwnerLease)*(1+t.MaxDrift)))
	}
	// Liveness: at least two renewals per lease, so one lost request does
	// not cost a lease.
	if t.Renew*2 > t.OwnerLease {
		return bad([]string{"Renew", "OwnerLease"}, "Renew (%s) must be at most half of OwnerLease (%s)", t.Renew, t.OwnerLease)
	}
	if t.BackoffMin < 0 || t.BackoffMin > t.BackoffMax {
		return bad([]string{"BackoffMin", "BackoffMax"}, "BackoffMin (%s) must be between 0 and BackoffMax (%s)", t.BackoffMin, t.BackoffMax)
	}
	if t.BackoffMax >= t.Renew {
		return bad([]string{"BackoffMax", "Renew"}, "BackoffMax (%s) must be shorter than Renew (%s)", t.BackoffMax, t.Renew)
	}
	// Recovery notification: one lost poll must not make a Lookup raise
	// loss on everything.
	if t.SyncTimeout < 2*t.Sync {
		return bad([]string{"SyncTimeout", "Sync"}, "SyncTimeout (%s) must be at least twice Sync (%s)", t.SyncTimeout, t.Sync)
	}
	// A Lookup that syncs on time must be able to get a delta.
	if t.LogRetention < t.SyncTimeout {
		return bad([]string{"LogRetention", "SyncTimeout"}, "LogRetention (%s) must be at least SyncTimeout (%s)", t.LogRetention, t.SyncTimeout)
	}
	return nil
}

// NotificationBound is the documented recovery-notification bound, in real
// time: every change of a range's LGN without the migrated flag, recorded by
// the Manager at real time T, is raised as a loss notification by every live
// Lookup before T + NotificationBound (docs/protocol.md). A Lookup's
// SyncTimeout is measured on its own clock, which may run slow by the drift.
func (t Timing) NotificationBound() time.Duration {
	return time.Duration(float64(t.SyncTimeout) * (1 + t.MaxDrift))
}

// The liveness rule: a client that sent a message on its stream to a
// Manager replica and has heard nothing on that stream for the answer wait
// since gives the stream up and tries another replica. An open connection
// proves nothing: a stalled process (SIGSTOP, a long pause, a stuck disk)
// or a proxy that stopped forwarding keeps it open while answering nothing,
// and an Owner that waits on it lets its leases run out. The waits are short
// enough that an Owner whose leader stalls reaches the next leader and
// renews before its lease ends (docs/protocol.md, "Liveness"), and long
// enough that a leader answering within a fraction of a renewal is never
// left.

// OwnerAnswerWait is how long an Owner waits for a word on its lease stream
// after sending a request before it tries another replica: half a renewal.
func (t Timing) OwnerAnswerWait() time.Duration { return t.Renew / 2 }

// OwnerQuiet is the longest an Owner that renews every Renew goes without
// hearing from the replica it talks to before it moves on: one renewal
// interval and the answer wait. It is the same rule as OwnerAnswerWait,
// seen by a client that checks only at its renewal timer, as the
// simulation's Owners do.
func (t Timing) OwnerQuiet() time.Duration { return t.Renew + t.OwnerAnswerWait() }

// LookupAnswerWait is how long a Lookup waits for a word on its sync stream
// (an answer or a push) after sending a poll before it tries another
// replica: a quarter of Sync, the interval at which it polls again while
// its last poll is unanswered.
func (t Timing) LookupAnswerWait() time.Duration { return t.Sync / 4 }

// LookupQuiet is LookupAnswerWait seen at the Lookup's poll timer: one Sync
// interval and the answer wait.
func (t Timing) LookupQuiet() time.Duration { return t.Sync + t.LookupAnswerWait() }

// HeartbeatEvery is how long a Manager replica leaves a sync stream that
// takes heartbeats without a message before it sends one: half of Sync, so
// that a heartbeat arrives before the copy's age reaches Sync, when the
// Lookup would poll (docs/protocol.md, "Heartbeats").
func (t Timing) HeartbeatEvery() time.Duration { return t.Sync / 2 }

// LookupPollMax is the longest a Lookup on a stream that takes heartbeats
// goes without a poll, however fresh the heartbeats keep its copy: a
// replica forgets a session that has not polled for LookupPollMax and two
// SyncTimeouts (replica.Feed), and the replica's elapsed time a heartbeat
// reports is kept within reach of the Lookup's memory of its requests.
func (t Timing) LookupPollMax() time.Duration { return 16 * t.Sync }

// NextPoll is when a Lookup polls next, given when it last polled and how
// fresh its copy is (zero: never answered): when the copy's age reaches
// Sync, no sooner than Sync/4 after the last poll (the retry while one is
// unanswered), nor later than LookupPollMax after it. Zero if it never
// polled (its first tick polls).
func (t Timing) NextPoll(lastPoll, fresh time.Time) time.Time {
	if lastPoll.IsZero() {
		return time.Time{}
	}
	retry := lastPoll.Add(t.Sync / 4)
	if fresh.IsZero() {
		return retry
	}
	next := fresh.Add(t.Sync)
	if m := lastPoll.Add(t.LookupPollMax()); m.Before(next) {
		next = m
	}
	if next.Before(retry) {
		next = retry
	}
	return next
}

// Vouched is the freshness a push or heartbeat vouches for: the replica
// received the request the Lookup sent at sentAt, and built the message
// since later on its own clock, which may run fast by MaxDrift
// (docs/protocol.md, "Heartbeats").
func (t Timing) Vouched(sentAt time.Time, since time.Duration) time.Time {
	return sentAt.Add(time.Duration(float64(since) / (1 + t.MaxDrift)))
}

// JudgingDrift is the MaxDrift with which a Lookup configured with own
// judges what a push or heartbeat vouches for once the Manager has said
// its own is manager (SyncResponse.MaxDrift): the larger of the two. The
// Manager's bound is the deployment's, so a Lookup left on the default
// never overstates a heartbeat's freshness against a Manager run with a
// larger one; a Lookup told to allow more keeps its own.
func JudgingDrift(own, manager float64) float64 { return max(own, manager) }

// VouchesFor reports whether a Manager replica with timings t may vouch
// for freshness to a Lookup that judges it with MaxDrift lookup
// (SyncRequest.MaxDrift): only if lookup is at least t.MaxDrift. A Lookup
// that allows its clock less drift against the replica's than the
// replica's own bound would take a heartbeat for fresher than it is; it
// gets no heartbeats, and its pushes vouch for nothing, until a request
// says enough. Its polls are answered as ever: an answer's freshness is
// its request's send time, which no drift enters (docs/protocol.md,
// "Heartbeats").
func (t Timing) VouchesFor(lookup float64) bool { return lookup >= t.MaxDrift }
