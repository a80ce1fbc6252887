// Package thumbnail is an example service built on tierq's library alone: a
// thumbnailer that reads an image (PNG or JPEG) from a source directory and
// writes a scaled-down PNG into an output directory. It is a different
// shape from the reference app's services: its work is CPU-bound and takes
// hundreds of milliseconds for a large image, its args carry no tier (tierq
// keeps the tier in the job's metadata), and it fails in both ways a real
// service does:
//
//   - an image that is not there yet (an upload still in flight) is a
//     transient failure: River retries it with backoff, and after the last
//     attempt tierq's drain moves it to the dead-letter table, from where an
//     operator replays it once the file is there;
//   - an image that cannot be decoded, a path outside the source directory,
//     or a width out of range can never work: the job is cancelled with the
//     reason.
//
// Service builds the service; the mains under cmd/ run its worker, and a
// scheduler and an API that combine it with the reference app's services.
package thumbnail

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // decodes JPEG sources
	"image/png"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/riverqueue/river"

	"github.com/tierq/tierq/service"
)

// Kind is the job kind of a thumbnail.
const Kind = "thumbnail"

// Timeout bounds one attempt of a thumbnail job, the kind's timeout
// (service.Timeout): a thumbnail of the largest image takes well under a
// second.
const Timeout = 30 * time.Second

// Width limits of a thumbnail, in pixels.
const (
	MinWidth = 16
	MaxWidth = 1024
)

// Args are a thumbnail job's args:
//
//	{"image": "uploads/cat.jpg", "width": 256}
type Args struct {
	// Image is the source image's path, relative to the worker's source
	// directory. It is the args' unique field: a second request for the
	// same image and width while one is queued is the same job.
	Image string `json:"image" river:"unique"`
	// Width is the thumbnail's width in pixels (MinWidth to MaxWidth); the
	// height keeps the image's proportions.
	Width int `json:"width" river:"unique"`
}

// Kind is the job kind.
func (Args) Kind() string { return Kind }

// Validate refuses args that can never work, before they are inserted (the
// API calls it through service.Kind.DecodeArgs); the worker checks again.
func (a *Args) Validate() error {
	switch {
	case a.Image == "":
		return errors.New("image is required")
	case filepath.IsAbs(a.Image) || !filepath.IsLocal(a.Image):
		return fmt.Errorf("image %q must be a relative path inside the source directory", a.Image)
	case a.Width < MinWidth || a.Width > MaxWidth:
		return fmt.Errorf("width %d not in %d..%d", a.Width, MinWidth, MaxWidth)
	}
	return nil
}

// Worker makes thumbnails.
type Worker struct {
	river.WorkerDefaults[Args]

	sourceDir string
	outputDir string
}

var _ river.Worker[Args] = (*Worker)(nil)

// NewWorker returns a worker reading images under sourceDir and writing
// thumbnails into outputDir.
func NewWorker(sourceDir, outputDir string) *Worker {
	return &Worker{sourceDir: sourceDir, outputDir: outputDir}
}

// Work reads the image, scales it and writes the thumbnail, named by the
// image's path and the width.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	if err := job.Args.Validate(); err != nil {
		return river.JobCancel(err)
	}
	f, err := os.Open(filepath.Join(w.sourceDir, job.Args.Image))
	if errors.Is(err, fs.ErrNotExist) {
		// Not there yet: retried with backoff.
		return fmt.Errorf("image %q not found (yet)", job.Args.Image)
	}
	if err != nil {
		return fmt.Errorf("open image: %w", err)
	}
	defer f.Close()
	src, _, err := image.Decode(f)
	if err != nil {
		return river.JobCancel(fmt.Errorf("decode image %q: %w", job.Args.Image, err))
	}
	thumb, err := Scale(ctx, src, job.Args.Width)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(w.outputDir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	out := filepath.Join(w.outputDir, OutputName(job.Args))
	tmp, err := os.CreateTemp(w.outputDir, ".thumb-*")
	if err != nil {
		return fmt.Errorf("create thumbnail: %w", err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	if err := png.Encode(tmp, thumb); err != nil {
		tmp.Close()
		return fmt.Errorf("encode thumbnail: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write thumbnail: %w", err)
	}
	// A job delivered twice writes the same file twice: the rename makes
	// each write whole.
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("write thumbnail: %w", err)
	}
	return nil
}

// OutputName is the thumbnail's file name for args: a hash of the image's
// path, then the width.
func OutputName(args Args) string {
	sum := sha256.Sum256([]byte(args.Image))
	return hex.EncodeToString(sum[:8]) + "-" + strconv.Itoa(args.Width) + ".png"
}

// Scale is src scaled to width pixels wide, each output pixel the average of
// the source pixels it covers (a box filter). It stops when ctx ends.
func Scale(ctx context.Context, src image.Image, width int) (image.Image, error) {
	b := src.Bounds()
	if b.Dx() == 0 || b.Dy() == 0 {
		return nil, river.JobCancel(errors.New("image is empty"))
	}
	height := max(1, b.Dy()*width/b.Dx())
	dst := image.NewNRGBA(image.Rect(0, 0, width, height))
	for y := range height {
		if y%32 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		y0, y1 := b.Min.Y+y*b.Dy()/height, b.Min.Y+max((y+1)*b.Dy()/height, y*b.Dy()/height+1)
		for x := range width {
			x0, x1 := b.Min.X+x*b.Dx()/width, b.Min.X+max((x+1)*b.Dx()/width, x*b.Dx()/width+1)
			var r, g, bl, a, n uint64
			for sy := y0; sy < y1; sy++ {
				for sx := x0; sx < x1; sx++ {
					cr, cg, cb, ca := src.At(sx, sy).RGBA()
					r, g, bl, a, n = r+uint64(cr), g+uint64(cg), bl+uint64(cb), a+uint64(ca), n+1
				}
			}
			dst.Set(x, y, color.RGBA64{R: uint16(r / n), G: uint16(g / n), B: uint16(bl / n), A: uint16(a / n)}) //nolint:gosec // averages of 16-bit values
		}
	}
	return dst, nil
}

// Deps are what the thumbnail service's workers need: where images are
// read from and where thumbnails are written. The scheduler and the API,
// which run none of them, leave both empty.
type Deps struct {
	SourceDir string
	OutputDir string
}

// ServiceName is the service's name (WORKER_SERVICE=thumbnailer; its
// variables are THUMBNAILER_QUEUE_*_WORKERS).
const ServiceName = "thumbnailer"

// Service is the thumbnail service: kind thumbnail in the queues
// thumbnails_priority, thumbnails_default and thumbnails_scheduled, with 2,
// 1 and 1 workers per process by default (its work is CPU-bound: one
// worker per core).
func Service(deps Deps) (*service.Service, error) {
	return service.New(&service.Config{
		Name:      ServiceName,
		BaseQueue: "thumbnails",
		Kinds:     []service.Kind{service.WorkerKind(NewWorker(deps.SourceDir, deps.OutputDir), service.Timeout[Args](Timeout))},
		Workers:   &service.ClassWorkers{Priority: 2, Default: 1, Scheduled: 1},
	})
}
