package app

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

const (
	producerToken = "producer-token-thumbnails"
	adminToken    = "admin-token-thumbnails"
)

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// writeImage writes a w×h PNG with a gradient, so that scaling it is real
// work.
func writeImage(t *testing.T, path string, w, h int) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetNRGBA(x, y, color.NRGBA{R: uint8(x), G: uint8(y), B: 128, A: 255}) //nolint:gosec // wraps on purpose
		}
	}
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, png.Encode(f, img))
	require.NoError(t, f.Close())
}

type system struct {
	db      *testdb.DB
	api     string // http://host:port
	metrics string // the thumbnail worker's
	source  string
	output  string
	env     []string
}

func (s *system) call(t *testing.T, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	return proctest.CallJSON(t, method, s.api+path, token, body)
}

func (s *system) get(t *testing.T, url, token string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, raw)
	return string(raw)
}

// job reads GET /v1/jobs/{id}.
func (s *system) job(t *testing.T, id any) map[string]any {
	t.Helper()
	status, job := s.call(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%v", id), producerToken, nil)
	require.Equal(t, http.StatusOK, status)
	return job
}

func (s *system) waitState(t *testing.T, id any, state string) map[string]any {
	t.Helper()
	var job map[string]any
	testdb.WaitFor(t, 60*time.Second, fmt.Sprintf("job %v %s", id, state), func() bool {
		job = s.job(t, id)
		return job["state"] == state
	})
	return job
}

// run is a deployment's run function (RunScheduler, RunAPI, ...).
type run = func(ctx context.Context, environ []string, stdout io.Writer) error

// startSystem runs, in this process on db, the scheduler and the API given
// (the thumbnail service's own, or those joined with the reference app),
// and the thumbnail service's own worker deployment with no default-queue
// workers (free work waits there until the scheduler ages and escalates
// it).
func startSystem(t *testing.T, db *testdb.DB, runScheduler, runAPI run) *system {
	t.Helper()
	s := &system{db: db, api: "http://" + freeAddr(t), source: t.TempDir(), output: t.TempDir()}
	s.env = []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema, "LOG_FORMAT=json"}
	metricsAddr := freeAddr(t)
	s.metrics = "http://" + metricsAddr

	logs := proctest.Start(t, s.env,
		proctest.Deployment{Name: "scheduler", Run: runScheduler, Env: []string{
			"RESCUE_STUCK_JOBS_AFTER=61s", "AGING_INTERVAL=1s", "AGING_STEP=1s",
			"ESCALATION_INTERVAL=1s", "ESCALATE_DEFAULT_AFTER=3s", "DLQ_DRAIN_INTERVAL=1s",
		}},
		proctest.Deployment{Name: "api", Run: runAPI, Env: []string{
			"API_ADDR=" + strings.TrimPrefix(s.api, "http://"), "API_TOKEN=" + producerToken, "API_ADMIN_TOKEN=" + adminToken,
			"MAX_ATTEMPTS=2",
		}},
		proctest.Deployment{Name: "worker", Run: RunWorker, Env: []string{
			"WORKER_SERVICE=thumbnailer", "THUMBNAILER_QUEUE_DEFAULT_WORKERS=0",
			"THUMBNAIL_SOURCE_DIR=" + s.source, "THUMBNAIL_OUTPUT_DIR=" + s.output, "METRICS_ADDR=" + metricsAddr,
		}},
	)
	testdb.WaitFor(t, 30*time.Second, "the API answers", func() bool {
		resp, err := http.Get(s.api + "/healthz") //nolint:noctx // a probe
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	proctest.WaitOutput(t, logs["scheduler"], "scheduler started", 30*time.Second)
	return s
}

// TestThumbnails runs the example service for real on its own registry, as
// a team runs its services: its worker, scheduler and API on a database
// that only tierq's migrations made (no reference app's table, none
// created). Jobs enqueued through the API are routed by tier, worked by
// the service's worker deployment, aged and escalated when they wait,
// dead-lettered when they keep failing and replayed, and show in /metrics,
// River UI and tierctl watch; the API's /openapi.json describes the
// thumbnail kind alone.
func TestThumbnails(t *testing.T) {
	t.Parallel()
	s := startSystem(t, testdb.NewCore(t), RunScheduler, RunAPI)
	ctx := t.Context()
	writeImage(t, filepath.Join(s.source, "big.png"), 2400, 1600)
	writeImage(t, filepath.Join(s.source, "small.png"), 300, 200)
	require.NoError(t, subscriptions.Set(ctx, s.db.Pool, "u_pro", tiers.Pro))

	// The API's OpenAPI document describes the thumbnail kind, and only it,
	// with the schema generated from thumbnail.Args.
	create := s.createJob(t)
	require.Equal(t, []string{"thumbnail"}, create.Kind.Enum)
	require.Len(t, create.Args.OneOf, 1)
	require.Equal(t, "thumbnail", create.Args.OneOf[0]["x-kind"])
	require.Equal(t, map[string]any{
		"image": map[string]any{"type": "string"},
		"width": map[string]any{"type": "integer", "format": "int64"},
	}, create.Args.OneOf[0]["properties"])
	require.Equal(t, false, create.Args.OneOf[0]["additionalProperties"])

	thumb := func(user, image string) map[string]any { return s.thumb(t, user, image) }

	// A paid request: thumbnails_priority, worked at once.
	paid := thumb("u_pro", "big.png")
	require.Equal(t, "thumbnails_priority", paid["queue"])
	require.Equal(t, "pro", paid["tier"])
	s.waitState(t, paid["id"], "completed")
	require.FileExists(t, filepath.Join(s.output, thumbnail.OutputName(thumbnail.Args{Image: "big.png", Width: 128})))

	// The API decodes the kind's args strictly and asks them to validate.
	status, body := s.call(t, http.MethodPost, "/v1/jobs", producerToken,
		map[string]any{"kind": "thumbnail", "user_id": "u_pro", "args": map[string]any{"image": "../etc/passwd", "width": 128}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, `invalid args: image "../etc/passwd" must be a relative path inside the source directory`, body["error"])
	status, body = s.call(t, http.MethodPost, "/v1/jobs", producerToken,
		map[string]any{"kind": "thumbnail", "user_id": "u_pro", "args": map[string]any{"image": "a.png", "width": 128, "tier": "enterprise"}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, `args may not set tier or user_id, not even empty (args.tier given): the server sets both`, body["error"])

	// A free request waits in thumbnails_default, which this deployment
	// does not serve: aging lifts it, escalation moves it to the priority
	// queue after 3 s, and it is worked there.
	free := thumb("u_free", "small.png")
	require.Equal(t, "thumbnails_default", free["queue"])
	require.Equal(t, "free", free["tier"])
	done := s.waitState(t, free["id"], "completed")
	require.Equal(t, "thumbnails_priority", done["queue"])
	var kinds []string
	for _, m := range done["moves"].([]any) {
		move := m.(map[string]any)
		kinds = append(kinds, move["kind"].(string))
		if move["kind"] == "escalation" {
			require.Equal(t, "thumbnails_default", move["from_queue"])
			require.Equal(t, "thumbnails_priority", move["to_queue"])
			require.Equal(t, "scheduler", move["actor"])
		}
	}
	require.Contains(t, kinds, "aging")
	require.Contains(t, kinds, "escalation")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM job_escalations WHERE job_id = $1 AND to_queue = 'thumbnails_priority'`, free["id"]))

	// An image that is not there: retried, then dead-lettered after its 2
	// attempts; replayed once it is there, and worked.
	late := thumb("u_pro", "late.png")
	dead := s.waitState(t, late["id"], "dead_letter")
	require.Len(t, dead["errors"], 2)
	require.Equal(t, `image "late.png" not found (yet)`, dead["errors"].([]any)[1].(map[string]any)["error"])
	writeImage(t, filepath.Join(s.source, "late.png"), 640, 480)
	status, replayed := s.call(t, http.MethodPost, fmt.Sprintf("/v1/dead-letters/%v/replay", dead["dead_letter_id"]), adminToken, map[string]any{"actor": "alice"})
	require.Equal(t, http.StatusOK, status, "%v", replayed)
	require.Equal(t, "thumbnails_priority", replayed["queue"])
	again := s.waitState(t, replayed["job_id"], "completed")
	require.Equal(t, "pro", again["tier"])
	require.Equal(t, "u_pro", again["tenant"])

	// /metrics: the API's queue gauges list the service's queues; the
	// worker's wait histogram counts each attempt it started: pro, the paid
	// job, the late one's two attempts and its replay; free, the escalated
	// one.
	apiMetrics := s.get(t, s.api+"/metrics", "")
	for _, queue := range []string{"thumbnails_priority", "thumbnails_default", "thumbnails_scheduled"} {
		require.Contains(t, apiMetrics, `tierq_queue_depth{queue="`+queue+`",state="available"}`)
	}
	workerMetrics := s.get(t, s.metrics+"/metrics", "")
	require.Contains(t, workerMetrics, `tierq_job_wait_seconds_count{queue="thumbnails_priority",tier="pro"} 4`)
	require.Contains(t, workerMetrics, `tierq_job_wait_seconds_count{queue="thumbnails_priority",tier="free"} 1`)

	// River UI, served by the same API: the service's queues, and a job
	// with its tier in metadata.
	require.Contains(t, s.get(t, s.api+"/riverui/api/queues", adminToken), `"thumbnails_priority"`)
	uiJob := s.get(t, fmt.Sprintf("%s/riverui/api/jobs/%v", s.api, paid["id"]), adminToken)
	require.Contains(t, uiJob, `"tierq:tier":"pro"`)
	require.Contains(t, uiJob, `"kind":"thumbnail"`)

	// tierctl watch shows the service's queues (registered in River by its worker) and their waits by tier:
	// of the pro jobs, the paid one and the replay are in river_job (the
	// late one's attempts went to the dead letters).
	tierctl := filepath.Join(t.TempDir(), "tierctl")
	build := exec.CommandContext(ctx, "go", "build", "-o", tierctl, "github.com/tierq/tierq/cmd/tierctl")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))
	watch := exec.CommandContext(ctx, tierctl, "watch", "--once")
	watch.Env = append(os.Environ(), s.env...)
	out, err = watch.CombinedOutput()
	require.NoError(t, err, string(out))
	// SCHEDULED PENDING HELD AVAILABLE RETRYABLE RUNNING OLDEST DEAD
	require.Regexp(t, `(?m)^\s*thumbnails_priority\s+0\s+0\s+0\s+0\s+0\s+0\s+\S+\s+0$`, string(out))
	require.Regexp(t, `(?m)^\s*thumbnails_priority\s+pro\s+2\s+\S+\s+\S+$`, string(out))
	require.Regexp(t, `(?m)^\s*thumbnails_priority\s+free\s+1\s+\S+\s+\S+$`, string(out))

	// Nothing made the reference app's tables.
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM pg_catalog.pg_tables
		WHERE schemaname = $1 AND tablename IN ('analysis_results', 'spec_documents', '`+jobs.MigrationTable+`')`, s.db.Schema))
}

// TestThumbnailsBesideTheReferenceApp is the side case: the thumbnail
// service beside the reference app's services under one scheduler and one
// API (RunSchedulerWithReference, RunAPIWithReference), on a database that
// only tierq's migrations made. The scheduler applies the reference app's
// migration line when it starts; the API takes and describes the kinds of
// both; a thumbnail job is worked by the thumbnail worker, and a free
// analysis, which no worker here serves, waits in analysis_default until
// the one scheduler escalates it to analysis_priority.
func TestThumbnailsBesideTheReferenceApp(t *testing.T) {
	t.Parallel()
	db := testdb.NewCore(t)
	s := startSystem(t, db, RunSchedulerWithReference, RunAPIWithReference)
	ctx := t.Context()
	writeImage(t, filepath.Join(s.source, "cat.png"), 300, 200)
	require.NoError(t, subscriptions.Set(ctx, db.Pool, "u_pro", tiers.Pro))

	create := s.createJob(t)
	require.Equal(t, []string{"analysis", "specview", "thumbnail"}, create.Kind.Enum)
	require.Len(t, create.Args.OneOf, 3)
	require.Equal(t, "thumbnail", create.Args.OneOf[2]["x-kind"])
	require.Equal(t, 3, db.Count(t, `SELECT count(*) FROM pg_catalog.pg_tables
		WHERE schemaname = $1 AND tablename IN ('analysis_results', 'spec_documents', '`+jobs.MigrationTable+`')`, db.Schema))

	paid := s.thumb(t, "u_pro", "cat.png")
	require.Equal(t, "thumbnails_priority", paid["queue"])
	s.waitState(t, paid["id"], "completed")

	status, analysis := s.call(t, http.MethodPost, "/v1/jobs", producerToken,
		map[string]any{"kind": "analysis", "user_id": "u_free", "args": map[string]any{"target": t.TempDir()}})
	require.Equal(t, http.StatusCreated, status, "%v", analysis)
	require.Equal(t, "analysis_default", analysis["queue"])
	testdb.WaitFor(t, 30*time.Second, "the analysis escalated to analysis_priority", func() bool {
		return s.job(t, analysis["id"])["queue"] == "analysis_priority"
	})
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM job_escalations WHERE job_id = $1
		AND from_queue = 'analysis_default' AND to_queue = 'analysis_priority' AND actor = 'scheduler'`, analysis["id"]))
}

// createJobProperties are the properties of CreateJob, POST /v1/jobs's
// body, in the API's OpenAPI document.
type createJobProperties struct {
	Kind struct {
		Enum []string `json:"enum"`
	} `json:"kind"`
	Args struct {
		OneOf []map[string]any `json:"oneOf"`
	} `json:"args"`
}

// createJob reads /openapi.json's CreateJob properties.
func (s *system) createJob(t *testing.T) createJobProperties {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas struct {
				CreateJob struct {
					Properties createJobProperties `json:"properties"`
				} `json:"CreateJob"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.get(t, s.api+"/openapi.json", "")), &doc))
	return doc.Components.Schemas.CreateJob.Properties
}

// thumb enqueues a 128-pixel thumbnail of image for user through the API.
func (s *system) thumb(t *testing.T, user, image string) map[string]any {
	t.Helper()
	status, job := s.call(t, http.MethodPost, "/v1/jobs", producerToken,
		map[string]any{"kind": "thumbnail", "user_id": user, "args": map[string]any{"image": image, "width": 128}})
	require.Equal(t, http.StatusCreated, status, "%v", job)
	return job
}
