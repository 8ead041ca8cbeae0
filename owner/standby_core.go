package owner

// The seam between the runtime's standby API and the core: what the core
// learned from the Manager's answers about standbys, and the in-sync
// reports the runtime hands it.

// rolesOf returns the core's standby roles, sorted by range.
func rolesOf(core *Core) *roles {
	_ = core
	return &roles{}
}

// reportInSync hands an InSync report to the core, for its next request.
func (o *Owner) reportInSync(core *Core, m inSyncMsg) {
	_, _ = core, m
}
