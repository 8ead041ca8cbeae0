package owner

import (
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/protocol"
)

// checkZone reports a zone label New would refuse: longer than
// protocol.MaxZoneLen, not UTF-8, or with a control character.
func checkZone(z string) error {
	if len(z) > protocol.MaxZoneLen {
		return &leasehold.ConfigError{Package: "owner", Field: "Zone",
			Why: fmt.Sprintf("is %d bytes long; at most %d allowed (protocol.MaxZoneLen)", len(z), protocol.MaxZoneLen)}
	}
	if !utf8.ValidString(z) {
		return &leasehold.ConfigError{Package: "owner", Field: "Zone", Why: fmt.Sprintf("%q is not valid UTF-8", z)}
	}
	for _, r := range z {
		if r < 0x20 || r == 0x7f {
			return &leasehold.ConfigError{Package: "owner", Field: "Zone", Why: fmt.Sprintf("%q: holds a control character", z)}
		}
	}
	return nil
}

// publishRoles publishes the core's pairings for StandbyOf,
// CheckReplicated, StandbyFor and CheckStandbyWrite. The loop calls it
// before it publishes the held set: a write that sees a new lease in
// CheckLeaseNow then finds the lease's pairing, never a held set newer
// than the pairings.
func (o *Owner) publishRoles(core *Core) {
	sb := &core.sb
	prev := o.roles.Load()
	if prev.epoch == sb.epoch && maps.Equal(prev.mine, sb.mine) && slices.Equal(prev.of, sb.of) {
		return
	}
	o.roles.Store(&roles{epoch: sb.epoch, mine: maps.Clone(sb.mine), of: slices.Clone(sb.of)})
}
