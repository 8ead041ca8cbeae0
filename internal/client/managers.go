package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// LeaderKey is the trailer metadata key in which a Manager replica that
// refuses a stream names the leader's client address.
const LeaderKey = "leasehold-leader"

// RelayKey is the metadata key ("1") with which a client asks a Manager
// replica to relay its stream to the leader: a follower then opens the
// same stream to its leader, over its own connection, and passes the
// messages both ways, and the leader's refusal or end back (the relayed
// stream is marked with manager's relayedKey).
// The leader serves a relayed stream by exactly the rules of a direct one;
// the relay is one more hop of the network, which may delay or lose
// messages as any hop may. A replica that leads, or knows no leader, serves
// or refuses the stream itself. Only the Owners' lease streams are relayed.
const RelayKey = "leasehold-relay"

// NotLeader refuses a stream on a Manager replica that cannot serve it (a
// follower for an Owner's lease stream, a replica that is not caught up for
// a Lookup's sync stream). It sets the trailer metadata key LeaderKey to
// leader, the leader's client address, when known (leader may be ""), and
// returns an Unavailable status for the handler to return:
//
//	leasehold: manager is not the leader (leader at 10.0.0.2:7400)
//	leasehold: manager is not the leader (leader unknown)
//
// ctx is the stream's context. Clients read the hint with LeaderHint and
// reconnect to the leader at once.
func NotLeader(ctx context.Context, leader string) error {
	where := "leader unknown"
	if leader != "" {
		// SetTrailer fails only outside an RPC; the message carries the
		// address all the same.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderKey, leader))
		where = "leader at " + leader
	}
	return status.Errorf(codes.Unavailable, "%s (%s)", notLeaderMsg, where)
}

const notLeaderMsg = "leasehold: manager is not the leader"

// leaderInMsg finds the address in NotLeader's message, for a trailer lost
// on the way (a proxy that drops trailers).
var leaderInMsg = regexp.MustCompile(`^` + regexp.QuoteMeta(notLeaderMsg) + ` \(leader at (\S+)\)$`)

// LeaderHint returns the leader's address named by a stream that failed with
// err, a NotLeader refusal, and whose trailer was trailer (nil is fine), or
// "" when err names none.
func LeaderHint(err error, trailer metadata.MD) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return ""
	}
	if v := trailer.Get(LeaderKey); len(v) > 0 && v[len(v)-1] != "" {
		return v[len(v)-1]
	}
	if m := leaderInMsg.FindStringSubmatch(st.Message()); m != nil {
		return m[1]
	}
	return ""
}

// IsNotLeader reports whether err is a NotLeader refusal, hint or not.
func IsNotLeader(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.HasPrefix(st.Message(), notLeaderMsg)
}

// CheckAddr reports an address that cannot name a Manager replica. An
// address is host:port with a numeric port (the host may be a name, an IPv4
// address, a bracketed IPv6 address, or empty for the local host), or a gRPC
// target whose scheme gRPC knows ("dns:///host:port", "unix:///path").
func CheckAddr(addr string) error {
	switch {
	case addr == "":
		return errors.New("an empty address")
	case strings.ContainsFunc(addr, unicode.IsSpace):
		return fmt.Errorf("address %q contains a space", addr)
	}
	if u, err := url.Parse(addr); err == nil && u.Scheme != "" && resolver.Get(u.Scheme) != nil {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q is not host:port", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("address %q is not host:port: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}

// SplitManagers splits a comma-separated list of Manager addresses
// ("10.0.0.1:7400,10.0.0.2:7400"), trims the spaces around each, checks each
// with CheckAddr and drops repeats, keeping the first. A list that is empty
// or blank yields nil; an empty entry in a longer list is an error.
func SplitManagers(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var out []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("an empty address in %q", list)
		}
		if err := CheckAddr(a); err != nil {
			return nil, err
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// Managers is the list of Manager replicas a client runtime follows, with
// one gRPC connection per address, dialled on first use (a leader's address
// learnt from a hint gets one too), replaced when Keep tries it again after
// it failed, and closed by Close.
type Managers struct {
	addrs   []string
	opts    []grpc.DialOption
	current atomic.Pointer[string]
	failed  atomic.Pointer[StreamError] // LastError

	// pause waits between rounds of failed attempts; tests replace it.
	pause func(context.Context, time.Duration) bool
	// maxWait caps that wait (0: the default, 2 s).
	maxWait time.Duration
	// answerWait, if set, is the answer deadline of Keep's streams, and
	// relay says replicas relay them (Liveness).
	answerWait func() time.Duration
	relay      bool
	// spread and spreadKey: Keep's streams go through the replicas in
	// rendezvous order (spread.go).
	spread    bool
	spreadKey uint64

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

// NewManagers returns the Managers for addrs (checked, without repeats, as
// Common.Normalize leaves them), dialled with opts (nil: plaintext). It
// creates the first address's connection at once, so bad options fail here.
func NewManagers(addrs []string, opts []grpc.DialOption) (*Managers, error) {
	if len(addrs) == 0 {
		return nil, errors.New("no manager address")
	}
	m := &Managers{addrs: slices.Clone(addrs), opts: opts, pause: Sleep, conns: map[string]*grpc.ClientConn{}}
	if _, err := m.Conn(addrs[0]); err != nil {
		return nil, err
	}
	return m, nil
}

// CapBackoff caps the wait between rounds of failed attempts at d, so a
// client whose timers are short (fast timings) is back soon after a new
// leader is elected. Call it before Keep.
func (m *Managers) CapBackoff(d time.Duration) { m.maxWait = d }

// Liveness sets the answer deadline of Keep's streams: a stream on which a
// message was sent and nothing was heard for answerWait() since is given
// up, and Keep tries the next replica as if the stream had broken.
// answerWait is called at each such send, so it may follow timings that
// change; nil or a result of 0 means no deadline. relay says the replicas
// can relay this kind of stream to their leader (RelayKey): when a replica
// refuses the stream naming as leader a replica whose own stream just went
// unanswered or failed, Keep asks the refusing replica to relay rather than
// going back to the silent one. Call it before Keep.
func (m *Managers) Liveness(answerWait func() time.Duration, relay bool) {
	m.answerWait, m.relay = answerWait, relay
}

// Addrs returns the configured addresses, in order.
func (m *Managers) Addrs() []string { return slices.Clone(m.addrs) }

// Current returns the address whose stream is working now, or "" when none
// is.
func (m *Managers) Current() string {
	if p := m.current.Load(); p != nil {
		return *p
	}
	return ""
}

func (m *Managers) setCurrent(addr string) { m.current.Store(&addr) }

// Conn returns the connection to addr, creating it on first use.
func (m *Managers) Conn(addr string) (*grpc.ClientConn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("closed")
	}
	if c := m.conns[addr]; c != nil {
		return c, nil
	}
	c, err := Dial(addr, m.opts)
	if err != nil {
		return nil, fmt.Errorf("manager at %s: %w", addr, err)
	}
	m.conns[addr] = c
	return c, nil
}

// redial replaces old, the connection to addr, by a new one, unless it was
// replaced already, and closes old.
func (m *Managers) redial(addr string, old *grpc.ClientConn) (*grpc.ClientConn, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errors.New("closed")
	}
	if c := m.conns[addr]; c != old {
		m.mu.Unlock()
		return c, nil
	}
	c, err := Dial(addr, m.opts)
	if err != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("manager at %s: %w", addr, err)
	}
	m.conns[addr] = c
	m.mu.Unlock()
	_ = old.Close()
	return c, nil
}

// Close closes every connection.
func (m *Managers) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	var errs []error
	for addr, c := range m.conns {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("manager at %s: %w", addr, err))
		}
		delete(m.conns, addr)
	}
	return errors.Join(errs...)
}
