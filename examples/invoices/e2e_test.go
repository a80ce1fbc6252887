package invoices_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// defaultURL is the test server when TEST_DATABASE_URL is not set, as in
// tierq's own tests (scripts/pg.sh sets it for `make test`).
const defaultURL = "postgres://postgres@127.0.0.1:5432/tierq_test?sslmode=disable"

const (
	producerToken = "producer-token-invoices"
	adminToken    = "admin-token-invoices-e2e"
)

// TestInvoices runs the invoices service as a team runs it: this module's
// three mains, built from docs/library.md's code, as processes on a database
// that only `tierctl migrate` made, with the stock tierctl (built from
// tierq's module through the replace) against them. Jobs enqueued through
// the API are routed by tier and worked; the periodic job runs; a mail that
// cannot go is dead-lettered after its kind's 2 attempts; and, with the
// worker stopped so that jobs stay where they are put, tierctl escalates a
// job waiting in invoices_default, the API replays one dead letter and
// `tierctl dlq replay --to-queue` another, into invoices_priority, where a
// new worker works them.
func TestInvoices(t *testing.T) {
	t.Parallel()
	s := setup(t)

	s.tierctl(t, "migrate")
	require.Equal(t, "u_pro: pro\n", s.tierctl(t, "subscriptions", "set", "u_pro", "pro"))

	scheduler := s.start(t, "invoices-scheduler", "DLQ_DRAIN_INTERVAL=1s")
	s.start(t, "invoices-api", "API_ADDR="+strings.TrimPrefix(s.api, "http://"),
		"API_TOKEN="+producerToken, "API_ADMIN_TOKEN="+adminToken)
	worker := s.start(t, "invoices-worker", "WORKER_SERVICE=invoices")
	scheduler.waitOutput(t, "scheduler started")
	worker.waitOutput(t, "worker started")
	waitFor(t, "the API answers", func() bool {
		resp, err := http.Get(s.api + "/healthz") //nolint:noctx // a probe
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// The stock tierctl learned the invoices service from the database
	// (the three processes recorded it), and nothing else.
	services := s.tierctl(t, "services", "list")
	require.Regexp(t, `^SERVICE\s+QUEUES\s+KINDS\s+SOURCE\s+RECORDED BY\s+FIRST SEEN\s+LAST SEEN\n`+
		`invoices\s+invoices_priority invoices_default invoices_scheduled\s+invoice_render invoice_send\s+database\s+(worker|scheduler|api)\s+\S+ \S+\s+\S+ \S+\n$`, services)
	// It enqueues a kind with the attempts the kind declares, as recorded.
	require.Equal(t, "enqueued 1 invoice_send jobs:\n  invoices_default     1\n",
		s.tierctl(t, "enqueue", "--kind", "invoice_send", "--args", `{"invoice_id": 90, "email": "ap@example.com"}`))
	require.Equal(t, 1, s.count(t, `SELECT count(*) FROM river_job WHERE kind = 'invoice_send' AND args->>'invoice_id' = '90' AND max_attempts = 2`))

	// Routing: a pro user's job goes to invoices_priority, a free user's to
	// invoices_default; both are worked.
	rendered := s.enqueue(t, "u_pro", "invoice_render", `{"invoice_id": 1, "format": "pdf"}`)
	require.Equal(t, "invoices_priority", rendered["queue"])
	require.Equal(t, "pro", rendered["tier"])
	sent := s.enqueue(t, "u_free", "invoice_send", `{"invoice_id": 2, "email": "ap@example.com"}`)
	require.Equal(t, "invoices_default", sent["queue"])
	require.Equal(t, "free", sent["tier"])
	s.waitJob(t, rendered["id"], "invoices_priority", "completed")
	s.waitJob(t, sent["id"], "invoices_default", "completed")

	// The API takes the registry's kinds alone, decoded strictly.
	status, body := s.call(t, http.MethodPost, "/v1/jobs", producerToken,
		map[string]any{"kind": "analysis", "user_id": "u_pro", "args": map[string]any{"target": "/srv"}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, `unknown kind "analysis" (want invoice_render, invoice_send)`, body["error"])
	status, body = s.call(t, http.MethodPost, "/v1/jobs", producerToken,
		map[string]any{"kind": "invoice_render", "user_id": "u_pro", "args": map[string]any{"invoice_id": 1, "format": "docx"}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, `invalid args: format "docx" not pdf, html or ledger`, body["error"])

	// The periodic job: the scheduler queued the day's ledger in
	// invoices_scheduled when it became leader, with the scheduler's
	// MAX_ATTEMPTS (invoice_render declares none), and the worker rendered
	// it.
	waitFor(t, "the ledger rendered", func() bool {
		return s.count(t, `SELECT count(*) FROM river_job WHERE kind = 'invoice_render' AND queue = 'invoices_scheduled'
			AND args = '{"format": "ledger", "invoice_id": 0}' AND state = 'completed' AND max_attempts = 10`) == 1
	})

	// A mail that cannot go: 2 attempts (the kind's MaxAttempts) a second
	// apart, then the scheduler's drain moves it to dead_letter_jobs.
	bouncedPro := s.enqueue(t, "u_pro", "invoice_send", `{"invoice_id": 3, "email": "ap@bounce.invalid"}`)
	bouncedFree := s.enqueue(t, "u_free", "invoice_send", `{"invoice_id": 4, "email": "ap@bounce.invalid"}`)
	deadPro := s.waitDeadLetter(t, bouncedPro["id"])
	require.Equal(t, deadLetter{Queue: "invoices_priority", Kind: "invoice_send", Attempt: 2, MaxAttempts: 2,
		LastError: "send invoice 3: ap@bounce.invalid: domain does not receive mail"}, deadPro.deadLetter)
	deadFree := s.waitDeadLetter(t, bouncedFree["id"])
	require.Equal(t, deadLetter{Queue: "invoices_default", Kind: "invoice_send", Attempt: 2, MaxAttempts: 2,
		LastError: "send invoice 4: ap@bounce.invalid: domain does not receive mail"}, deadFree.deadLetter)

	// With the worker stopped, jobs stay in the queue they are put in.
	worker.stop(t)

	// tierctl escalate moves a job waiting in invoices_default to
	// invoices_priority, at priority 1, audited.
	waiting := s.enqueue(t, "u_free", "invoice_render", `{"invoice_id": 5, "format": "html"}`)
	require.Equal(t, "invoices_default", waiting["queue"])
	waitingID := int64(waiting["id"].(float64))
	require.Equal(t, fmt.Sprintf("job %d (invoice_render, available): invoices_default priority 4 -> invoices_priority priority 1\n", waitingID),
		s.tierctl(t, "escalate", strconv.FormatInt(waitingID, 10), "--to", "priority", "--actor", "alice", "--reason", "customer call"))
	require.Equal(t, job{Queue: "invoices_priority", State: "available", Priority: 1}, s.job(t, waitingID))
	require.Equal(t, 1, s.count(t, `SELECT count(*) FROM job_escalations WHERE job_id = $1
		AND from_queue = 'invoices_default' AND to_queue = 'invoices_priority' AND actor = 'alice'`, waitingID))

	// The API replays the pro dead letter into its own queue, exactly once.
	status, replayed := s.call(t, http.MethodPost, fmt.Sprintf("/v1/dead-letters/%d/replay", deadPro.ID), adminToken, map[string]any{"actor": "alice"})
	require.Equal(t, http.StatusOK, status, "%v", replayed)
	require.Equal(t, "invoices_priority", replayed["queue"])
	replayPro := int64(replayed["job_id"].(float64))
	require.Equal(t, replayPro, s.replayJobID(t, deadPro.ID))
	require.Equal(t, job{Queue: "invoices_priority", State: "available", Priority: 4}, s.job(t, replayPro))
	status, again := s.call(t, http.MethodPost, fmt.Sprintf("/v1/dead-letters/%d/replay", deadPro.ID), adminToken, map[string]any{"actor": "alice"})
	require.Equal(t, http.StatusConflict, status)
	require.Regexp(t, fmt.Sprintf(`^dead letter already replayed: id %d was replayed as job %d by alice at \S+ \(force to replay again\)$`,
		deadPro.ID, replayPro), again["error"])

	// tierctl replays the free one into invoices_priority (--to-queue).
	out := s.tierctl(t, "dlq", "replay", strconv.FormatInt(deadFree.ID, 10), "--to-queue", "invoices_priority", "--actor", "alice")
	replayFree := s.replayJobID(t, deadFree.ID)
	require.Equal(t, fmt.Sprintf("dead letter %d: replayed as job %d in invoices_priority\n", deadFree.ID, replayFree), out)
	require.Equal(t, job{Queue: "invoices_priority", State: "available", Priority: 4}, s.job(t, replayFree))

	// A new worker works them there: the escalated job completes; the
	// replays run (and, their address still bouncing, are dead letters
	// again, now from invoices_priority).
	s.start(t, "invoices-worker", "WORKER_SERVICE=invoices").waitOutput(t, "worker started")
	s.waitJob(t, waiting["id"], "invoices_priority", "completed")
	require.Equal(t, "invoices_priority", s.waitDeadLetter(t, replayPro).Queue)
	require.Equal(t, "invoices_priority", s.waitDeadLetter(t, replayFree).Queue)

	// Nothing of tierq's reference app is in the database.
	require.Zero(t, s.count(t, `SELECT count(*) FROM pg_catalog.pg_tables
		WHERE tablename IN ('analysis_results', 'spec_documents')`))
	require.Zero(t, s.count(t, `SELECT count(*) FROM river_job WHERE queue NOT LIKE 'invoices\_%' AND queue <> 'scheduler'`))
}

// TestNoReferenceApp: no package of this module depends on tierq's
// reference app (package jobs), its examples or its benchmarks: a team's
// service needs none of it, and neither does invoicesctl, which embeds
// tierctl's commands (package ctl).
func TestNoReferenceApp(t *testing.T) {
	t.Parallel()
	for pkg, want := range map[string]string{"./...": "github.com/tierq/tierq/worker", "./cmd/invoicesctl": "github.com/tierq/tierq/ctl"} {
		out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		deps := strings.Fields(string(out))
		require.Contains(t, deps, want, pkg)
		for _, dep := range deps {
			require.NotRegexp(t, `^github\.com/tierq/tierq/(jobs|internal/refapp|bench|examples)(/|$)`, dep, pkg)
		}
	}
}

// system is the test's database, the binaries and the API's address.
type system struct {
	pool *pgxpool.Pool
	url  string // the test's own database
	bin  string // directory of the built binaries
	api  string // http://host:port
}

// setup builds this module's mains and the stock tierctl, and creates a
// database of the test's own on the test server (TEST_DATABASE_URL's),
// dropped when the test ends: a team's database, which nothing but
// `tierctl migrate` will have made.
func setup(t *testing.T) *system {
	t.Helper()
	ctx := t.Context()
	s := &system{bin: t.TempDir()}

	build := exec.CommandContext(ctx, "go", "build", "-o", s.bin+string(filepath.Separator),
		"./cmd/...", "github.com/tierq/tierq/cmd/tierctl")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	server, err := url.Parse(databaseURL())
	require.NoError(t, err)
	admin, own := *server, *server
	admin.Path = "/postgres"
	name := "invoices_e2e_" + randomHex(t)
	own.Path = "/" + name
	s.url = own.String()
	adminExec := func(ctx context.Context, sql string) {
		conn, err := pgx.Connect(ctx, admin.String())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	adminExec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adminExec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})

	cfg, err := pgxpool.ParseConfig(s.url)
	require.NoError(t, err)
	cfg.MaxConns = 2
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(s.pool.Close)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.api = "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	return s
}

func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return defaultURL
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// env is what every process gets: the test's database, and PATH.
func (s *system) env(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + s.url}, extra...)
}

// tierctl runs the stock tierctl with args on the test's database and
// returns its output, failing t unless it exits 0.
func (s *system) tierctl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(s.bin, "tierctl"), args...)
	cmd.Env = s.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "tierctl %s: %s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String()
}

// process is one of the module's mains, running.
type process struct {
	name    string
	cmd     *exec.Cmd
	out     *buffer
	stopped bool
}

// start runs the main name with the test's database and extra, and
// stops it, if the test did not, when the test ends; a failed test logs
// its output.
func (s *system) start(t *testing.T, name string, extra ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(filepath.Join(s.bin, name)), out: &buffer{}} //nolint:gosec // the test's own binary
	p.cmd.Env = s.env(extra...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		if !p.stopped {
			p.stop(t)
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and waits for the process to exit, failing t unless it
// exits 0 within 30 seconds (running jobs drain first).
func (p *process) stop(t *testing.T) {
	t.Helper()
	p.stopped = true
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "%s's exit; output:\n%s", p.name, p.out.String())
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not stop within 30s of SIGTERM", p.name)
	}
}

// waitOutput waits until the process has written want.
func (p *process) waitOutput(t *testing.T, want string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to write %q", p.name, want), func() bool {
		return strings.Contains(p.out.String(), want)
	})
}

// buffer is a bytes.Buffer safe to read while a process writes to it.
type buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls cond until it holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 1m waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// call sends a JSON request to the API and returns the status and the
// decoded answer.
func (s *system) call(t *testing.T, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), method, s.api+path, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(answer, &out), string(answer))
	return resp.StatusCode, out
}

// enqueue inserts a job of kind for user through POST /v1/jobs.
func (s *system) enqueue(t *testing.T, user, kind, args string) map[string]any {
	t.Helper()
	status, job := s.call(t, http.MethodPost, "/v1/jobs", producerToken,
		map[string]any{"kind": kind, "user_id": user, "args": json.RawMessage(args)})
	require.Equal(t, http.StatusCreated, status, "%v", job)
	return job
}

func (s *system) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

// job is the part of a river_job row the test looks at.
type job struct {
	Queue    string
	State    string
	Priority int
}

func (s *system) job(t *testing.T, id int64) job {
	t.Helper()
	var j job
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT queue, state::text, priority FROM river_job WHERE id = $1`, id).
		Scan(&j.Queue, &j.State, &j.Priority))
	return j
}

// waitJob waits until the job (an id from the API's JSON) is in state in
// queue.
func (s *system) waitJob(t *testing.T, id any, queue, state string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("job %v %s in %s", id, state, queue), func() bool {
		j := s.job(t, int64(id.(float64)))
		return j.Queue == queue && j.State == state
	})
}

// deadLetter is the part of a dead_letter_jobs row the test looks at.
type deadLetter struct {
	Queue       string
	Kind        string
	Attempt     int
	MaxAttempts int
	LastError   string
}

type deadLetterRow struct {
	ID int64
	deadLetter
}

// waitDeadLetter waits for the dead letter of job id (an int64, or an id
// from the API's JSON) and returns it.
func (s *system) waitDeadLetter(t *testing.T, id any) deadLetterRow {
	t.Helper()
	jobID, ok := id.(int64)
	if !ok {
		jobID = int64(id.(float64))
	}
	var dl deadLetterRow
	waitFor(t, fmt.Sprintf("job %d dead-lettered", jobID), func() bool {
		err := s.pool.QueryRow(t.Context(), `SELECT id, queue, kind, attempt, max_attempts, errors -> -1 ->> 'error'
			FROM dead_letter_jobs WHERE job_id = $1`, jobID).
			Scan(&dl.ID, &dl.Queue, &dl.Kind, &dl.Attempt, &dl.MaxAttempts, &dl.LastError)
		if errors.Is(err, pgx.ErrNoRows) {
			return false
		}
		require.NoError(t, err)
		return true
	})
	return dl
}

// replayJobID is the job a dead letter was replayed as (replay_job_id).
func (s *system) replayJobID(t *testing.T, deadLetterID int64) int64 {
	t.Helper()
	var id int64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT replay_job_id FROM dead_letter_jobs WHERE id = $1 AND replayed_by = 'alice'`, deadLetterID).Scan(&id))
	return id
}
