//go:build !linux

package bench

import "syscall"

// stopWithParent is nil where the kernel cannot signal a child when its
// parent dies: a bench killed with kill -9 leaves its worker processes to
// be stopped by hand.
func stopWithParent() *syscall.SysProcAttr { return nil }
