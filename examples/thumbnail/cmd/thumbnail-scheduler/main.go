// Command thumbnail-scheduler is the thumbnail example's scheduler deployment
// (app.RunScheduler): the thumbnail service alone, as a team runs its own
// services. thumbnail-scheduler-with-reference is the side case.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/examples/thumbnail/app"
)

func main() {
	if err := app.RunScheduler(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "thumbnail-scheduler:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}
