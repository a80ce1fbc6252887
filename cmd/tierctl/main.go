// Command tierctl is tierq's operator command line: package ctl's commands
// (see its documentation for each command and the environment it reads).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/tierq/tierq/ctl"
)

func main() {
	if err := ctl.Main(context.Background(), os.Args, os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tierctl:", err)
		os.Exit(ctl.ExitCode(err))
	}
}
