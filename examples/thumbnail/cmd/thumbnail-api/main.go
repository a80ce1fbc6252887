// Command thumbnail-api is the thumbnail example's API deployment
// (app.RunAPI): the thumbnail service alone, as a team runs its own
// services. thumbnail-api-with-reference is the side case.
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
	if err := app.RunAPI(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "thumbnail-api:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}
