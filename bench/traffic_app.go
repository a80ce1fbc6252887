package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/service"
)

// Role is what one process of the application is, for Options.AppCommand.
type Role string

// The roles of the traffic scenario's processes.
const (
	// RoleWorker is one worker deployment's process; its environment's
	// WORKER_SERVICE names the service, LOAD_TEST_WORKLOAD is true.
	RoleWorker Role = "worker"
	// RoleScheduler is one scheduler replica of the whole application:
	// every kind of Options.Registry and the load-test workload registered
	// (its rescuer retries any of them), every queue swept and drained.
	RoleScheduler Role = "scheduler"
	// RoleAPI is the API of the whole application (its registry is
	// Options.Registry), whose GET /v1/queues and /metrics list every
	// service's queues.
	RoleAPI Role = "api"
)

// Secrets of the traffic scenario's API.
const (
	trafficToken      = "bench-traffic-producer-token"
	trafficAdminToken = "bench-traffic-admin-token"
)

// trafficSchedulerEnv is the schedulers' environment beside the database:
// production defaults but for the rescue of stuck jobs (as the chaos suite
// sets it: one second over the longest kind's timeout, 1 m) and a drain of
// discarded jobs every second (30 s by default), so that a run settles in
// seconds.
var trafficSchedulerEnv = []string{"RESCUE_STUCK_JOBS_AFTER=61s", "DLQ_DRAIN_INTERVAL=1s", "DLQ_ALERT_THRESHOLD=0", "METRICS_ADDR="}

// appProcess is one running process of the traffic scenario's application.
type appProcess struct {
	role     Role
	name     string // worker-<service>-<n>, scheduler-<n>, api
	service  string // a worker's
	cmd      *exec.Cmd
	out      *logBuffer
	clientID string // workers and schedulers: the River client's ID
	addr     string // the API's listening address
	exited   chan struct{}
	waitErr  error
	// killed: the scenario killed it (SIGKILL); stopRequested: it sent
	// SIGTERM.
	killed, stopRequested bool
}

// app is the traffic scenario's application: worker processes of every
// service, schedulers and the API, all started through Options.AppCommand
// against the scenario's schema.
type app struct {
	e *env

	mu    sync.Mutex
	count map[string]int // processes started per role and service
	procs []*appProcess
}

func newApp(e *env) *app { return &app{e: e, count: map[string]int{}} }

// environ is every process's environment: the database (url), the schema,
// JSON logs (their start lines are read).
func (a *app) environ(url string) []string {
	return []string{"DATABASE_URL=" + url, "DATABASE_SCHEMA=" + a.e.Name, "LOG_FORMAT=json", "LOG_LEVEL=info"}
}

// start starts a process of role with the environment plus extra and waits
// until it says it started.
func (a *app) start(ctx context.Context, role Role, svc string, extra ...string) (*appProcess, error) {
	if a.e.opts.AppCommand == nil {
		return nil, errors.New("bench: the traffic scenario needs Options.AppCommand")
	}
	key := string(role)
	if svc != "" {
		key += "-" + svc
	}
	a.mu.Lock()
	a.count[key]++
	p := &appProcess{role: role, service: svc, name: fmt.Sprintf("%s-%d", key, a.count[key]), out: &logBuffer{}, exited: make(chan struct{})}
	a.mu.Unlock()
	// Each process's connections carry its name (application_name): the
	// faults phase waits for a killed process's backends to go.
	url, err := withAppName(a.e.opts.DatabaseURL, a.e.Name+"_"+p.name)
	if err != nil {
		return nil, err
	}
	environ := append(a.environ(url), extra...)
	p.cmd = a.e.opts.AppCommand(role, environ)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if p.cmd.SysProcAttr == nil {
		p.cmd.SysProcAttr = stopWithParent()
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	a.mu.Lock()
	a.procs = append(a.procs, p)
	a.mu.Unlock()
	if err := p.waitStarted(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Each process's pool (DATABASE_MAX_CONNS, 20 by default): the full run's
// nine processes stay under PostgreSQL's default of 100 connections with
// the bench's own.
const (
	workerConns    = "DATABASE_MAX_CONNS=10"
	schedulerConns = "DATABASE_MAX_CONNS=6"
	apiConns       = "DATABASE_MAX_CONNS=8"
)

// worker starts a worker process of svc with the scenario's worker settings.
func (a *app) worker(ctx context.Context, svc *service.Service, settings []string) (*appProcess, error) {
	return a.start(ctx, RoleWorker, svc.Name(), append([]string{"WORKER_SERVICE=" + svc.Name(), "LOAD_TEST_WORKLOAD=true", "METRICS_ADDR=", workerConns}, settings...)...)
}

// scheduler starts a scheduler replica.
func (a *app) scheduler(ctx context.Context) (*appProcess, error) {
	return a.start(ctx, RoleScheduler, "", append([]string{schedulerConns}, trafficSchedulerEnv...)...)
}

// api starts the API on a port of its own.
func (a *app) api(ctx context.Context) (*appProcess, error) {
	return a.start(ctx, RoleAPI, "", "API_ADDR=127.0.0.1:0", "API_TOKEN="+trafficToken, "API_ADMIN_TOKEN="+trafficAdminToken, apiConns)
}

// live are the processes of role still running (all roles for "").
func (a *app) live(role Role) []*appProcess {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*appProcess
	for _, p := range a.procs {
		if (role == "" || p.role == role) && p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// stop stops the processes of role (all for ""), at once: SIGTERM, then
// SIGKILL after processStopTimeout. It returns an error for any that did
// not exit cleanly.
func (a *app) stop(role Role) error {
	procs := a.live(role)
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// unexpectedExits names the processes that exited without being stopped or
// killed by the scenario.
func (a *app) unexpectedExits() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, p := range a.procs {
		if !p.alive() && !p.killed && !p.stopped() {
			errs = append(errs, fmt.Errorf("%s exited by itself (%v):\n%s", p.name, p.waitErr, tailOf(p.out.String(), 20)))
		}
	}
	return errors.Join(errs...)
}

func (p *appProcess) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stopped reports whether the scenario stopped the process with SIGTERM.
func (p *appProcess) stopped() bool { return p.stopRequested }

// kill sends SIGKILL, as a crash or the OOM killer would, and waits for
// the process to be gone.
func (p *appProcess) kill() {
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and waits for a clean exit, killing the process after
// processStopTimeout.
func (p *appProcess) stop() error {
	if !p.alive() {
		return nil
	}
	p.stopRequested = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(processStopTimeout):
		p.kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed:\n%s", p.name, processStopTimeout, tailOf(p.out.String(), 20))
	}
	if p.waitErr != nil {
		return fmt.Errorf("%s: %w:\n%s", p.name, p.waitErr, tailOf(p.out.String(), 20))
	}
	return nil
}

// waitStarted waits for the process's start line: "<role> started" with
// its River client's ID, or the API's "api listening" with its address.
func (p *appProcess) waitStarted(ctx context.Context) error {
	return waitStart(ctx, p.name, p.exited, func() error { return p.waitErr }, p.out, time.Now().Add(processStartTimeout), p.readStart)
}

// readStart looks for the start line in the process's first output.
func (p *appProcess) readStart() bool {
	p.out.mu.Lock()
	head := slices.Clone(p.out.head)
	p.out.mu.Unlock()
	msg := string(p.role) + " started"
	if p.role == RoleAPI {
		msg = "api listening"
	}
	s := bufio.NewScanner(bytes.NewReader(head))
	s.Buffer(nil, logBufferHalf)
	for s.Scan() {
		line := s.Bytes()
		if !bytes.Contains(line, []byte(msg)) {
			continue
		}
		var entry struct {
			Msg      string `json:"msg"`
			ClientID string `json:"client_id"`
			Addr     string `json:"addr"`
		}
		if json.Unmarshal(line, &entry) != nil || entry.Msg != msg {
			continue
		}
		p.clientID, p.addr = strings.TrimSpace(entry.ClientID), entry.Addr
		return p.role != RoleAPI || p.addr != ""
	}
	return false
}

// get reads path from the API (with the admin token for /v1/ paths),
// waiting as long as the API's own request timeout.
func (p *appProcess) get(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, api.DefaultRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path, nil)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(path, "/v1/") {
		req.Header.Set("Authorization", "Bearer "+trafficAdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.200s", path, resp.Status, body)
	}
	return body, nil
}

// leader is the River client ID holding the leadership now, "" for none.
func (e *env) leader(ctx context.Context) (string, error) {
	var id string
	err := e.Pool.QueryRow(ctx, `SELECT coalesce((SELECT leader_id FROM `+riverschema.LeaderTable+` WHERE expires_at > now()), '')`).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("read the leader: %w", err)
	}
	return id, nil
}

// waitLeader waits until one of the live schedulers leads, and returns it.
func (a *app) waitLeader(ctx context.Context, timeout time.Duration) (*appProcess, error) {
	deadline := time.Now().Add(timeout)
	for {
		id, err := a.e.leader(ctx)
		if err != nil {
			return nil, err
		}
		for _, p := range a.live(RoleScheduler) {
			if p.clientID == id {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no live scheduler leads after %s (river_leader: %q)", timeout, id)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// tailOf is the last n lines of s.
func tailOf(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
