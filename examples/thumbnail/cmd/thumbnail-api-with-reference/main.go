// Command thumbnail-api-with-reference is the one API of a database that
// runs the reference app's services beside the thumbnail service
// (app.RunAPIWithReference): POST /v1/jobs takes the kinds of both. A side
// case: the example's own API is thumbnail-api.
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
	if err := app.RunAPIWithReference(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "thumbnail-api-with-reference:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}
