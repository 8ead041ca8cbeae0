package owner

import (
	"time"
)

// lateHandover reports whether a handover the application reports done at
// now came too late to be handed over: at or after its deadline.
//
// An application stops taking writes on a range while it copies the
// range's state out (the Handover upcall), and only until the deadline:
// past it the Manager recalls the range without the state, and the
// application serves the range again until the recall arrives (examples/kv
// does). A write taken then is in no copy. If the Owner still gave the
// range up and reported it handed over, the Manager would grant it to the
// next Owner marked migrated, and that write would be lost with no loss
// reported. So the deadline is one line for both: before it, the copy is
// complete and the range may go; from it on, the range stays until
// recalled, and its loss is reported. Both read this Owner's clock, and
// the check runs under the same call that would give the range up.
func (c *Core) lateHandover(now time.Time, h Handover) bool {
	if c.broken.LateHandoverDone {
		return false
	}
	return !now.Before(h.Deadline)
}
