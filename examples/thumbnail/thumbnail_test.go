package thumbnail_test

import (
	"context"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/tiers"
)

// writePNG writes a w×h PNG whose left half is red and right half blue.
func writePNG(t *testing.T, path string, w, h int) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.NRGBA{R: 255, A: 255}
			if x >= w/2 {
				c = color.NRGBA{B: 255, A: 255}
			}
			img.SetNRGBA(x, y, c)
		}
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, png.Encode(f, img))
	require.NoError(t, f.Close())
}

// TestThumbnailService works thumbnail jobs with a real River client on
// the service's own queues: a good image gets its thumbnail, a missing one
// is retried, one that is not an image is cancelled with the reason.
func TestThumbnailService(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	src, out := t.TempDir(), t.TempDir()
	writePNG(t, filepath.Join(src, "uploads", "wide.png"), 800, 400)
	require.NoError(t, os.WriteFile(filepath.Join(src, "uploads", "notes.png"), []byte("not an image"), 0o600))

	svc, err := thumbnail.Service(thumbnail.Deps{SourceDir: src, OutputDir: out})
	require.NoError(t, err)
	require.Equal(t, []string{"thumbnails_priority", "thumbnails_default", "thumbnails_scheduled"}, svc.Queues())
	workers := river.NewWorkers()
	require.NoError(t, svc.AddWorkers(workers))
	queues := map[string]river.QueueConfig{}
	for _, q := range svc.Queues() {
		queues[q] = river.QueueConfig{MaxWorkers: 2, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}
	}
	db.Start(t, &river.Config{
		Schema: db.Schema, Queues: queues, Workers: workers,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})

	insert := func(args thumbnail.Args, tier tiers.Tier) int64 {
		opts := svc.InsertOpts(tier, "u_1", false)
		opts.MaxAttempts = 3
		res, err := db.Producer(t).Insert(ctx, args, opts)
		require.NoError(t, err)
		return res.Job.ID
	}
	good := insert(thumbnail.Args{Image: "uploads/wide.png", Width: 64}, tiers.Pro)
	missing := insert(thumbnail.Args{Image: "uploads/later.png", Width: 64}, tiers.Free)
	broken := insert(thumbnail.Args{Image: "uploads/notes.png", Width: 64}, tiers.Free)
	require.Equal(t, "thumbnails_priority", db.Jobs(t, "id = $1", good)[0].Queue)
	require.Equal(t, "thumbnails_default", db.Jobs(t, "id = $1", missing)[0].Queue)

	testdb.WaitFor(t, 20*time.Second, "the good job completed and the broken one cancelled", func() bool {
		return db.Jobs(t, "id = $1", good)[0].State == "completed" && db.Jobs(t, "id = $1", broken)[0].State == "cancelled"
	})
	f, err := os.Open(filepath.Join(out, thumbnail.OutputName(thumbnail.Args{Image: "uploads/wide.png", Width: 64})))
	require.NoError(t, err)
	defer f.Close()
	thumb, err := png.Decode(f)
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 64, 32), thumb.Bounds())
	r, _, b, _ := thumb.At(5, 5).RGBA()
	require.Equal(t, [2]uint32{0xffff, 0}, [2]uint32{r, b}, "left half red")
	r, _, b, _ = thumb.At(60, 5).RGBA()
	require.Equal(t, [2]uint32{0, 0xffff}, [2]uint32{r, b}, "right half blue")

	var reason string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT errors[1]->>'error' FROM river_job WHERE id = $1`, broken).Scan(&reason))
	require.Contains(t, reason, `decode image "uploads/notes.png"`)

	testdb.WaitFor(t, 20*time.Second, "the missing image retried", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'retryable' AND errors[1]->>'error' = 'image "uploads/later.png" not found (yet)'`, missing) == 1
	})
}

func TestArgsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give thumbnail.Args
		want string
	}{
		{thumbnail.Args{Image: "a.png", Width: 64}, ""},
		{thumbnail.Args{Width: 64}, "image is required"},
		{thumbnail.Args{Image: "/etc/passwd", Width: 64}, `image "/etc/passwd" must be a relative path inside the source directory`},
		{thumbnail.Args{Image: "../a.png", Width: 64}, `image "../a.png" must be a relative path inside the source directory`},
		{thumbnail.Args{Image: "a.png", Width: 15}, "width 15 not in 16..1024"},
		{thumbnail.Args{Image: "a.png", Width: 1025}, "width 1025 not in 16..1024"},
	}
	for _, tt := range tests {
		err := tt.give.Validate()
		if tt.want == "" {
			require.NoError(t, err)
			continue
		}
		require.EqualError(t, err, tt.want)
	}
}
