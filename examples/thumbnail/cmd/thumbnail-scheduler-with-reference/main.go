// Command thumbnail-scheduler-with-reference is the one scheduler deployment
// of a database that runs the reference app's services beside the thumbnail
// service (app.RunSchedulerWithReference): every kind of both, the
// reference app's maintenance and its migration line. A side case: the
// example's own scheduler is thumbnail-scheduler.
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
	if err := app.RunSchedulerWithReference(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "thumbnail-scheduler-with-reference:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}
