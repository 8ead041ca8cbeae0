package client

import (
	"context"
	"time"
)

// SetPause replaces the wait between rounds of failed attempts, so tests
// can record it.
func (m *Managers) SetPause(f func(context.Context, time.Duration) bool) { m.pause = f }
