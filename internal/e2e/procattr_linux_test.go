package e2e

import "syscall"

// sysProcAttr makes the kernel kill a child when the test process dies, so
// no process outlives a test that panicked or timed out.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
