package servers

import (
	"testing"
	"time"
)

func TestTimingForRenewIsValid(t *testing.T) {
	for _, r := range []time.Duration{500 * time.Millisecond, time.Second, 15 * time.Second} {
		tm := TimingForRenew(r)
		if err := tm.Validate(); err != nil {
			t.Errorf("TimingForRenew(%s): %v", r, err)
		}
		if tm.Renew != r || tm.OwnerLease != 4*r {
			t.Errorf("TimingForRenew(%s) = %+v", r, tm)
		}
	}
}
