package app

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/tiers"
)

func TestBadEnvironmentNamesTheVariable(t *testing.T) {
	t.Parallel()
	err := RunWorker(context.Background(), []string{"DATABASE_URL=postgres://x/y", "WORKER_SERVICE=thumbnailer", "THUMBNAIL_SOURCE_DIR=relative", "THUMBNAIL_OUTPUT_DIR=/tmp"}, &bytes.Buffer{})
	require.ErrorIs(t, err, config.ErrInvalid)
	require.ErrorContains(t, err, `THUMBNAIL_SOURCE_DIR="relative": must be an absolute directory`)

	err = RunWorker(context.Background(), []string{"DATABASE_URL=postgres://x/y", "WORKER_SERVICE=analyzer", "THUMBNAIL_SOURCE_DIR=/a", "THUMBNAIL_OUTPUT_DIR=/b"}, &bytes.Buffer{})
	require.ErrorIs(t, err, config.ErrInvalid)
	require.ErrorContains(t, err, `WORKER_SERVICE="analyzer": unknown service (want thumbnailer)`)

	err = RunWorker(context.Background(), []string{"DATABASE_URL=postgres://x/y", "WORKER_SERVICE=thumbnailer", "THUMBNAIL_SOURCE_DIR=/a", "THUMBNAIL_OUTPUT_DIR=/b", "THUMBNAILER_QUEUE_DEFAULT_WORKERS=many"}, &bytes.Buffer{})
	require.ErrorIs(t, err, config.ErrInvalid)
	require.ErrorContains(t, err, "THUMBNAILER_QUEUE_DEFAULT_WORKERS")
}

// TestWorksThumbnails runs the deployment until its context ends: a paid
// thumbnail job is worked from thumbnails_priority.
func TestWorksThumbnails(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	src, out := t.TempDir(), t.TempDir()
	f, err := os.Create(filepath.Join(src, "cat.png"))
	require.NoError(t, err)
	require.NoError(t, png.Encode(f, image.NewGray(image.Rect(0, 0, 300, 200))))
	require.NoError(t, f.Close())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- RunWorker(ctx, []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema, "WORKER_SERVICE=thumbnailer",
			"THUMBNAIL_SOURCE_DIR=" + src, "THUMBNAIL_OUTPUT_DIR=" + out}, &bytes.Buffer{})
	}()

	svc, err := thumbnail.Service(thumbnail.Deps{SourceDir: src, OutputDir: out})
	require.NoError(t, err)
	res, err := db.Producer(t).Insert(ctx, thumbnail.Args{Image: "cat.png", Width: 30}, svc.InsertOpts(tiers.Enterprise, "u_9", false))
	require.NoError(t, err)
	require.Equal(t, "thumbnails_priority", res.Job.Queue)
	testdb.WaitFor(t, 20*time.Second, "the thumbnail job completed", func() bool {
		return db.Jobs(t, "id = $1", res.Job.ID)[0].State == "completed"
	})
	require.FileExists(t, filepath.Join(out, thumbnail.OutputName(thumbnail.Args{Image: "cat.png", Width: 30})))
	cancel()
	require.NoError(t, <-done)
}
