package bench

import "syscall"

// stopWithParent makes a worker process get SIGTERM when the bench dies
// without stopping it (kill -9), so that none is left running.
func stopWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
