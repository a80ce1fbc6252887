// Command thumbnail-worker is the thumbnail example's worker deployment
// (app.RunWorker).
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
	if err := app.RunWorker(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "thumbnail-worker:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}
