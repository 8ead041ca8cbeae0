//go:build !linux

package e2e

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent's; elsewhere
// the children are stopped by t.Cleanup alone.
func sysProcAttr() *syscall.SysProcAttr { return nil }
