package owner

import "github.com/leasehold/leasehold/protocol"

// The seam between the runtime's standby API and the core: what the core
// learned from the Manager's answers about standbys, and the in-sync
// reports the runtime hands it.

// rolesOf returns the core's standby roles, sorted by range.
func rolesOf(core *Core) *roles {
	_ = core
	return &roles{}
}

// reportInSync hands an InSync report to the core, for its next request.
func (o *Owner) reportInSync(core *Core, m Holder) {
	_, _ = core, m
}

// SGN is a standby generation number: fresh every time a range's standby
// is named, dropped or promoted. A standby stores a replicated write only
// under the SGN it was last given, which fences a holder no longer paired
// with it, as the LGN fences a lease.
type SGN = protocol.SGN
