// Command thumbnail-worker is the thumbnail example service's worker
// deployment, built on tierq's exported packages alone: WORKER_SERVICE=thumbnailer
// (the only service it knows), THUMBNAILER_QUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS
// (2, 1 and 1 by default), THUMBNAIL_SOURCE_DIR and THUMBNAIL_OUTPUT_DIR
// (required), and every variable a tierq worker reads (DATABASE_URL, fetch
// tuning, METRICS_ADDR, ...: .env.example). A bad variable exits 2 naming
// it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

func main() {
	if err := run(context.Background(), os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "thumbnail-worker:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(config.ExitCodeInvalid)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, environ []string, stdout io.Writer) error {
	deps, err := depsFrom(environ)
	if err != nil {
		return err
	}
	services := func(*pgxpool.Pool) (*service.Registry, error) {
		svc, err := thumbnail.Service(deps)
		if err != nil {
			return nil, err
		}
		return service.NewRegistry(svc)
	}
	described, err := services(nil)
	if err != nil {
		return err
	}
	cfg, err := config.LoadWorker(environ, described)
	if err != nil {
		return err
	}
	return worker.Run(ctx, cfg, cfg.NewLogger(stdout), services)
}

// depsFrom reads THUMBNAIL_SOURCE_DIR and THUMBNAIL_OUTPUT_DIR: absolute
// directories, required.
func depsFrom(environ []string) (thumbnail.Deps, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	var problems []string
	dir := func(name string) string {
		v := env[name]
		if !filepath.IsAbs(v) {
			problems = append(problems, fmt.Sprintf("%s=%q: must be an absolute directory", name, v))
		}
		return v
	}
	deps := thumbnail.Deps{SourceDir: dir("THUMBNAIL_SOURCE_DIR"), OutputDir: dir("THUMBNAIL_OUTPUT_DIR")}
	if len(problems) > 0 {
		return deps, fmt.Errorf("%w: %s", config.ErrInvalid, strings.Join(problems, "; "))
	}
	return deps, nil
}
