package owner

import (
	"fmt"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/protocol"
)

// MaxZoneLen bounds Config.Zone.
const MaxZoneLen = protocol.MaxZoneLen

// checkZone reports a zone label New would refuse.
func checkZone(z string) error {
	if len(z) > MaxZoneLen || !utf8.ValidString(z) {
		return &leasehold.ConfigError{Package: "owner", Field: "Zone",
			Why: fmt.Sprintf("%q: must be valid UTF-8 of at most %d bytes (protocol.MaxZoneLen)", z, MaxZoneLen)}
	}
	for _, r := range z {
		if r < 0x20 || r == 0x7f {
			return &leasehold.ConfigError{Package: "owner", Field: "Zone", Why: fmt.Sprintf("%q: holds a control character", z)}
		}
	}
	return nil
}

// upcall is one delivery on the upcall goroutine: an ownership change or a
// standby change, in the order the loop saw them.
type upcall struct {
	own *OwnershipChange
	sb  *StandbyChange
}

// upcalls dispatches the upcalls to the application's two callbacks.
func upcalls(onChange func(OwnershipChange), onStandby func(StandbyChange)) func(upcall) {
	return func(u upcall) {
		switch {
		case u.own != nil && onChange != nil:
			onChange(*u.own)
		case u.sb != nil && onStandby != nil:
			onStandby(*u.sb)
		}
	}
}

// publishRoles publishes the core's standby roles for StandbyOf, HolderOf
// and CheckStandbyWrite, and returns the change to report to
// OnStandbyChange, nil if none. The loop publishes them before the held
// set: a write that sees a new lease in CheckLeaseNow then finds the
// lease's standby in StandbyOf (whose Lease it compares), never a held
// set newer than the roles. It queues the change after the held set's,
// so an application sees a promoted grant before the role it replaces
// is gone.
func (o *Owner) publishRoles(core *Core) *StandbyChange {
	next := rolesOf(core)
	if prev := o.roles.Load(); prev.equal(next) {
		return nil
	}
	o.roles.Store(next)
	return &StandbyChange{Standbys: next.standbys, Holders: next.holders}
}
