//go:build chaos

package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// Secrets every process gets; no log line of any process may contain them.
const (
	producerToken = "chaos-producer-token-6f1d2e9a"
	adminToken    = "chaos-admin-token-b7c4a0e35d"
	dbPassword    = "chaos-db-password-91ce"
)

// users, one per tier, subscribed with tierctl before the load starts.
var users = map[tiers.Tier]string{
	tiers.Free: "u_free", tiers.Pro: "u_pro", tiers.ProPlus: "u_pro_plus", tiers.Enterprise: "u_enterprise",
}

// baseEnv is every process's environment in the suite: short timeouts so
// that faults resolve in seconds. Job timeouts are each kind's own (1m at
// most; jobs.Timeouts, scheduler.Timeouts), the same in every process, so a
// job whose worker is alive and can reach the database is never rescued
// while it runs.
var baseEnv = []string{
	"LOG_LEVEL=info",
	"SOFT_STOP_TIMEOUT=2s",
	"MAX_ATTEMPTS=5",
}

// schedulerEnv: every sweep each second, cron slots every 2 and 3 seconds,
// stuck jobs rescued after 61 s, one second above the longest job kind's
// timeout (1m), which the scheduler requires (River's rescuer looks every
// 30 s).
var schedulerEnv = []string{
	"RESCUE_STUCK_JOBS_AFTER=61s",
	"AGING_INTERVAL=1s", "AGING_STEP=3s",
	"ESCALATION_INTERVAL=1s", "ESCALATE_SCHEDULED_AFTER=4s",
	"DLQ_DRAIN_INTERVAL=1s", "DLQ_ALERT_THRESHOLD=0",
	"REANALYZE_CRON=@every 2s", "REANALYZE_STALE_AFTER=1h",
	"RETENTION_CRON=@every 3s",
	"METRICS_ADDR=127.0.0.1:0",
}

// system is one scenario's installation: a database on the suite's cluster,
// its processes, and the ledger of every job the scenario inserted.
type system struct {
	t      *testing.T
	name   string
	dir    string
	url    string // with the password, as the processes get it
	env    []string
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx] // insert-only: the routing helper's load
	ledger *ledger
	apiURL string
	// registry is the reference app's (jobs.Registry): the suite runs its
	// services' workers and loads their queues. analyzer and specGen are
	// its two services.
	registry          *service.Registry
	analyzer, specGen *service.Service
	// workerEnv is added to every worker process's environment, the
	// replacements a scenario starts included (lendIdlePriority).
	workerEnv []string
	// schedulerExtraEnv is added to every scheduler process's environment
	// (capTenants: the limits by tier a scheduler records).
	schedulerExtraEnv []string
	// capped are the services whose tenants capTenants capped.
	capped []*service.Service

	mu      sync.Mutex
	procs   []*proc
	counts  map[string]int
	targets atomic.Int64
}

// newSystem creates the scenario's database, migrates it with tierctl and
// subscribes one user per tier.
func newSystem(t *testing.T, name string) *system {
	t.Helper()
	require.True(t, suite.cluster.running(), "the cluster is down (an earlier scenario left it stopped)")
	ctx := context.Background()
	db := "chaos_" + strings.ReplaceAll(name, "-", "_")
	admin, err := pgx.Connect(ctx, suite.cluster.url("postgres"))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	return newSystemAt(t, name, withPassword(suite.cluster.url(db)))
}

// withPassword puts the database password into a URL of user postgres, as
// the processes get it.
func withPassword(url string) string {
	return strings.Replace(url, "postgres@", "postgres:"+dbPassword+"@", 1)
}

// newSystemAt is newSystem on a database that exists already, at url (with
// the password): the database-failover scenario's, on a cluster of its own.
func newSystemAt(t *testing.T, name, url string) *system {
	t.Helper()
	ctx := context.Background()
	s := &system{
		t: t, name: name, dir: filepath.Join(suite.base, name),
		url:    url,
		ledger: newLedger(), counts: map[string]int{},
		registry: testdb.Registry(t),
		analyzer: testdb.Service(t, jobs.ServiceAnalyzer), specGen: testdb.Service(t, jobs.ServiceSpecGen),
	}
	require.NoError(t, os.MkdirAll(filepath.Join(s.dir, "targets"), 0o755))
	require.NoError(t, chown(filepath.Join(s.dir, "targets"), suite.cred))
	// Analysis targets are confined to the scenario's checkouts.
	s.env = append([]string{"DATABASE_URL=" + s.url, "ANALYSIS_ROOTS=" + filepath.Join(s.dir, "targets")}, baseEnv...)

	s.tierctl("migrate")
	for tier, user := range users {
		s.tierctl("subscriptions", "set", user, tier.String())
	}

	var err error
	s.pool, err = pgxpool.New(ctx, s.url)
	require.NoError(t, err)
	t.Cleanup(s.pool.Close)
	s.client, err = river.NewClient(riverpgxv5.New(s.pool), producer.ClientConfig("", slog.New(slog.DiscardHandler)))
	require.NoError(t, err)

	t.Cleanup(func() {
		for _, p := range s.processes() {
			p.kill()
		}
		if t.Failed() {
			for _, p := range s.processes() {
				t.Logf("--- last lines of %s (pid %d):\n%s", p.name, p.pid, tail(p.out.String(), 25))
			}
		}
		s.checkNoSecretsLogged()
	})
	return s
}

// tierctl runs the real tierctl with args and returns its output, failing
// the test unless it exits 0.
func (s *system) tierctl(args ...string) string {
	s.t.Helper()
	out, err := s.tierctlErr(args...)
	require.NoError(s.t, err, "tierctl %v:\n%s", args, out)
	return out
}

// tierctlErr runs the real tierctl and returns its output and exit error.
func (s *system) tierctlErr(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(suite.bin, "tierctl"), args...) //nolint:gosec // the suite's own binary
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "USER=chaos"}, s.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: suite.cred}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// proc is one running tierq process.
type proc struct {
	name, binary string
	pid          int
	clientID     string // the River client's ID (workers, schedulers)
	metricsURL   string // schedulers
	cmd          *exec.Cmd
	out          *proctest.Buffer
	done         chan struct{}
	exitErr      error
}

var clientIDPattern = regexp.MustCompile(`client_id=(\S+)`)

// start starts binary with the scenario's environment plus extra and waits
// until it says it started.
func (s *system) start(binary string, extra ...string) *proc {
	s.t.Helper()
	s.mu.Lock()
	s.counts[binary]++
	name := fmt.Sprintf("%s-%d", binary, s.counts[binary])
	s.mu.Unlock()
	if binary == "worker" {
		for _, kv := range extra {
			if svc, ok := strings.CutPrefix(kv, "WORKER_SERVICE="); ok {
				name = fmt.Sprintf("%s-%s-%d", binary, svc, s.counts[binary])
			}
		}
	}

	logFile, err := os.Create(filepath.Join(s.dir, name+".log"))
	require.NoError(s.t, err)
	p := &proc{name: name, binary: binary, out: &proctest.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(suite.bin, binary)) //nolint:gosec // the suite's own binary
	p.cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH")}, s.env...), extra...)
	// Pdeathsig: a crashed or timed-out test leaves no process behind.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: suite.cred, Pdeathsig: syscall.SIGKILL}
	w := io.MultiWriter(logFile, p.out)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	require.NoError(s.t, p.cmd.Start())
	p.pid = p.cmd.Process.Pid
	go func() {
		p.exitErr = p.cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()

	switch binary {
	case "api":
		p.waitOutput(s.t, "api listening")
	default:
		p.waitOutput(s.t, binary+" started")
		m := clientIDPattern.FindStringSubmatch(p.out.String())
		require.NotNil(s.t, m, "no client_id in %s's output", name)
		p.clientID = m[1]
	}
	if binary == "scheduler" {
		p.metricsURL = proctest.MetricsURL(s.t, p.out)
	}
	return p
}

// waitOutput waits up to 30 s for the process to write want, failing t at
// once if it exits first.
func (p *proc) waitOutput(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.out.String(), want) {
		if !p.alive() {
			t.Fatalf("%s exited (%v) before writing %q:\n%s", p.name, p.exitErr, want, p.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s wrote no %q in 30s:\n%s", p.name, want, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// worker starts a worker of svc with the load-test workload registered and
// the system's workerEnv.
func (s *system) worker(svc *service.Service, extra ...string) *proc {
	env := append([]string{"WORKER_SERVICE=" + svc.Name(), "LOAD_TEST_WORKLOAD=true"}, s.workerEnv...)
	return s.start("worker", append(env, extra...)...)
}

// fairShareByWindows has the scenario's workers share by windows
// (QUEUE_FAIR_SHARE_MODE=windows): the scenarios that hold a flood back
// and check what happens to held jobs under a fault (s1, s3, s8) test
// windows, whose held jobs a fault could strand; by turns, the default,
// fair share holds nothing, and the other scenarios run it.
func (s *system) fairShareByWindows() {
	s.workerEnv = append(s.workerEnv, "QUEUE_FAIR_SHARE_MODE=windows")
}

// lendIdlePriority turns lending on for every service in the worker
// processes started from now on (<NAME>_LEND_IDLE_PRIORITY, the floor at its
// default of 1, set explicitly so the scenario does not change with the
// default): while no paid job waits, idle priority workers take free jobs
// from the service's default queue. Fair share needs nothing: it is on by
// default for the priority and default queues. Not every scenario lends:
// a lent job changes queue without an escalation audit row, which the
// operators-racing scenario's audit chains would rightly report.
func (s *system) lendIdlePriority() {
	for _, svc := range s.registry.Services() {
		s.workerEnv = append(s.workerEnv, svc.EnvPrefix()+"LEND_IDLE_PRIORITY=true", svc.EnvPrefix()+"LEND_FLOOR=1")
	}
}

// serviceOf is the service a worker process serves.
func (s *system) serviceOf(p *proc) *service.Service {
	s.t.Helper()
	for _, kv := range p.cmd.Env {
		if name, ok := strings.CutPrefix(kv, "WORKER_SERVICE="); ok {
			svc, err := s.registry.Parse(name)
			require.NoError(s.t, err)
			return svc
		}
	}
	s.t.Fatalf("%s is not a worker", p.name)
	return nil
}

// scheduler starts a scheduler replica.
func (s *system) scheduler(extra ...string) *proc {
	env := append(append([]string{}, schedulerEnv...), s.schedulerExtraEnv...)
	return s.start("scheduler", append(env, extra...)...)
}

// api starts the API on a free port.
func (s *system) api(extra ...string) *proc {
	port, err := freePort()
	require.NoError(s.t, err)
	s.apiURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	return s.start("api", append([]string{
		fmt.Sprintf("API_ADDR=127.0.0.1:%d", port), "API_TOKEN=" + producerToken, "API_ADMIN_TOKEN=" + adminToken,
	}, extra...)...)
}

// fullTopology starts what every scenario runs unless it needs otherwise:
// two workers per service, two schedulers, the API.
func (s *system) fullTopology(workerEnv ...string) {
	s.scheduler()
	s.scheduler()
	for range 2 {
		for _, svc := range s.registry.Services() {
			s.worker(svc, workerEnv...)
		}
	}
	s.api()
}

func (s *system) processes() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*proc(nil), s.procs...)
}

// alive reports whether the process is still running.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	if p.alive() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// terminate sends SIGTERM and returns how long the process took to exit,
// failing t if it does not exit within limit or exits with an error.
func (p *proc) terminate(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(limit):
		p.kill()
		t.Fatalf("%s did not exit within %s of SIGTERM", p.name, limit)
	}
	require.NoError(t, p.exitErr, "%s's exit after SIGTERM", p.name)
	return time.Since(start)
}

// checkNoSecretsLogged fails the test if any process's output contains a
// token or the database password.
func (s *system) checkNoSecretsLogged() {
	for _, p := range s.processes() {
		out := p.out.String()
		for _, secret := range []string{producerToken, adminToken, dbPassword} {
			if strings.Contains(out, secret) {
				s.t.Errorf("%s logged a secret (%.12s…)", p.name, secret)
			}
		}
	}
}

// call makes one API request with body as JSON (none when nil) and returns
// the status and body; err is a transport error (including the client's
// 10 s timeout).
func (s *system) call(ctx context.Context, method, path, token string, body any) (int, []byte, error) {
	if body == nil {
		return s.callRaw(ctx, method, path, token, nil)
	}
	data, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	return s.callRaw(ctx, method, path, token, data)
}

// callRaw makes one API request with exactly body (none when nil).
func (s *system) callRaw(ctx context.Context, method, path, token string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.apiURL+path, reader)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// newTarget creates a small checkout with two Go tests for an analysis job.
// It may run outside the test's goroutine, so it returns its error.
func (s *system) newTarget() (string, error) {
	dir := filepath.Join(s.dir, "targets", fmt.Sprintf("t%05d", s.targets.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	src := "package demo\n\nimport \"testing\"\n\nfunc TestOne(t *testing.T) {}\n\nfunc TestTwo(t *testing.T) {}\n"
	return dir, os.WriteFile(filepath.Join(dir, "demo_test.go"), []byte(src), 0o644)
}

// enqueueAnalysis enqueues an analysis job through the API for tier's user;
// on 201 the job goes into the ledger. It returns the status (0 on a
// transport error, -1 when the checkout could not be made) and how long the
// request took.
func (s *system) enqueueAnalysis(ctx context.Context, tier tiers.Tier, scheduled bool) (int, time.Duration) {
	target, err := s.newTarget()
	if err != nil {
		return -1, 0
	}
	start := time.Now()
	status, body, err := s.call(ctx, http.MethodPost, "/v1/jobs", producerToken, map[string]any{
		"kind": jobs.KindAnalysis, "user_id": users[tier], "args": map[string]string{"target": target}, "scheduled": scheduled,
	})
	took := time.Since(start)
	if err != nil {
		return 0, took
	}
	if status == http.StatusCreated {
		var job struct {
			ID    int64  `json:"id"`
			Queue string `json:"queue"`
		}
		if err := json.Unmarshal(body, &job); err == nil && job.ID > 0 {
			s.ledger.add(entry{id: job.ID, kind: jobs.KindAnalysis, queue: job.Queue, want: completed})
		}
	}
	return status, took
}

// loadtestJob is one load-test job to insert through the routing helper.
type loadtestJob struct {
	args jobs.LoadTestArgs
	opts *river.InsertOpts
	want final
}

// routedLoadtest is a recorded load-test job routed for tier and service by
// the service's InsertOpts, sleeping between minMS and maxMS, for no
// tenant.
func routedLoadtest(r *rand.Rand, svc *service.Service, tier tiers.Tier, scheduled bool, minMS, maxMS int) loadtestJob {
	return tenantLoadtest(r, svc, tier, "", scheduled, minMS, maxMS)
}

// tenantLoadtest is routedLoadtest on behalf of tenant: the job's
// jobmeta.Tenant, by which fair share shares a queue's workers ("" is one
// tenant too).
func tenantLoadtest(r *rand.Rand, svc *service.Service, tier tiers.Tier, tenant string, scheduled bool, minMS, maxMS int) loadtestJob {
	return loadtestJob{
		args: jobs.LoadTestArgs{SleepMS: minMS + r.IntN(maxMS-minMS+1), Record: true},
		opts: svc.InsertOpts(tier, tenant, scheduled),
		want: completed,
	}
}

// failingLoadtest makes job fail every attempt until until, with
// maxAttempts attempts; it should end dead-lettered.
func failingLoadtest(job loadtestJob, until time.Time, maxAttempts int) loadtestJob {
	job.args.FailUntil = &until
	opts := *job.opts
	opts.MaxAttempts = maxAttempts
	job.opts = &opts
	job.want = deadLettered
	return job
}

// insert inserts the jobs in one transaction and adds them to the ledger.
func (s *system) insert(ctx context.Context, batch []loadtestJob) error {
	_, err := s.insertIDs(ctx, batch)
	return err
}

// insertIDs is insert, returning the jobs' ids.
func (s *system) insertIDs(ctx context.Context, batch []loadtestJob) ([]int64, error) {
	params := make([]river.InsertManyParams, len(batch))
	for i, j := range batch {
		params[i] = river.InsertManyParams{Args: j.args, InsertOpts: j.opts}
	}
	res, err := s.client.InsertMany(ctx, params)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
		s.ledger.add(entry{
			id: r.Job.ID, kind: jobs.KindLoadTest, queue: r.Job.Queue, priority: r.Job.Priority,
			want: batch[i].want, recorded: batch[i].args.Record, flaky: batch[i].args.FailUntil != nil,
		})
	}
	return ids, nil
}

// load is steady work for a scenario: a batch of routed load-test jobs
// every Every, and an analysis job through the API every APIEvery.
type load struct {
	Every            time.Duration
	Batch            int
	MinMS, MaxMS     int
	Services         []*service.Service
	ScheduledPercent int
	// LongPercent of the jobs sleep 2.5–3.5 s instead (longer than the
	// soft-stop timeout, shorter than the job timeout).
	LongPercent int
	// FailPercent of the jobs fail every attempt (fail_until an hour ahead)
	// with a single attempt: each must end in dead_letter_jobs.
	FailPercent int
	// Tenants the routed jobs run for, one picked at random per job; none:
	// every routed job without a tenant. (The API's jobs run for the
	// user of their tier.)
	Tenants  []string
	APIEvery time.Duration
}

// loadStats is what the load saw.
type loadStats struct {
	mu           sync.Mutex
	insertErrors int
	apiStatus    map[int]int
}

// run drives l until ctx ends; the returned wait blocks until it stopped.
// An insert under way when ctx ends is finished, not cut off (opCtx): a cut
// could commit a job whose id the ledger never gets.
func (s *system) run(ctx context.Context, l load) (*loadStats, func()) {
	stats := &loadStats{apiStatus: map[int]int{}}
	opCtx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
		tick := time.NewTicker(l.Every)
		defer tick.Stop()
		for i := 0; ; i++ {
			batch := make([]loadtestJob, l.Batch)
			for k := range batch {
				n := i*l.Batch + k
				svc := l.Services[n%len(l.Services)]
				tier := tiers.All()[n%4]
				tenant := ""
				if len(l.Tenants) > 0 {
					tenant = l.Tenants[r.IntN(len(l.Tenants))]
				}
				job := tenantLoadtest(r, svc, tier, tenant, r.IntN(100) < l.ScheduledPercent, l.MinMS, l.MaxMS)
				if r.IntN(100) < l.LongPercent {
					job.args.SleepMS = 2500 + r.IntN(1001)
				}
				if r.IntN(100) < l.FailPercent {
					job = failingLoadtest(job, time.Now().Add(time.Hour), 1)
				}
				batch[k] = job
			}
			if err := s.insert(opCtx, batch); err != nil {
				stats.mu.Lock()
				stats.insertErrors++
				stats.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	if l.APIEvery > 0 {
		wg.Go(func() {
			tick := time.NewTicker(l.APIEvery)
			defer tick.Stop()
			for i := 0; ; i++ {
				status, _ := s.enqueueAnalysis(opCtx, tiers.All()[i%4], i%5 == 4)
				stats.mu.Lock()
				stats.apiStatus[status]++
				stats.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	return stats, wg.Wait
}

// loadTenants are the tenants of the steady load in the scenarios that run
// fair share against a flood; floodTenant is the one that floods.
var (
	loadTenants = []string{"tenant_a", "tenant_b", "tenant_c", "tenant_d"}
	floodTenant = "tenant_flood"
)

// flood inserts one tenant's burst through the routing helper, as a
// producer's batch: for each service, perQueue free jobs (its default
// queue) and perQueue pro jobs (its priority queue), recorded, sleeping
// 100–500 ms, one transaction per queue. The tenant's window in a queue is
// a few jobs (its share of the queue's workers, at least one), so fair share
// holds back nearly all of it, and lending moves free ones into the
// priority queue while no paid job waits there. It returns the ids of the
// jobs it inserted (all of them in the ledger); an error leaves the rest
// out.
func (s *system) flood(ctx context.Context, tenant string, perQueue int) ([]int64, error) {
	r := rand.New(rand.NewPCG(3, uint64(time.Now().UnixNano())))
	var ids []int64
	for _, svc := range s.registry.Services() {
		for _, tier := range []tiers.Tier{tiers.Pro, tiers.Free} {
			batch := make([]loadtestJob, perQueue)
			for i := range batch {
				batch[i] = tenantLoadtest(r, svc, tier, tenant, false, 100, 500)
			}
			res, err := s.insertIDs(context.WithoutCancel(ctx), batch)
			ids = append(ids, res...)
			if err != nil {
				return ids, err
			}
		}
	}
	return ids, nil
}

// heldSQL is the condition of a river_job row fair share holds back: the
// predicate of river_job_tierq_held_idx, constant so the index serves it.
const heldSQL = `state = 'pending' AND metadata ? '` + jobmeta.HeldAt + `'`

// held is how many jobs fair share holds back right now, in every queue.
func (s *system) held(ctx context.Context) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE `+heldSQL).Scan(&n))
	return n
}

// waitHeld waits up to 30 s until fair share holds back jobs of the flood
// ids in each queue the flood went into (the first pass over each queue
// after the insert holds nearly all of them: a flood lasts seconds, a pass
// comes within a tick) and returns how many jobs it holds, in every queue.
func (s *system) waitHeld(ctx context.Context, ids []int64) int {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var queues, heldQueues, held int
		require.NoError(s.t, s.pool.QueryRow(ctx, `
			SELECT count(DISTINCT queue), count(DISTINCT queue) FILTER (WHERE `+heldSQL+`),
			       (SELECT count(*) FROM river_job WHERE `+heldSQL+`)
			FROM river_job WHERE id = ANY($1)`, ids).Scan(&queues, &heldQueues, &held))
		if heldQueues == queues {
			return held
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("fair share held back the flood in %d of its %d queues within 30s", heldQueues, queues)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fairShareWatch is what a scenario saw fair share and lending do while it
// ran, sampled every 100 ms: the most jobs held at once (capHeldPeak: of
// them, held by a tenant's concurrency cap), and the jobs seen lent and not
// started yet.
type fairShareWatch struct {
	mu          sync.Mutex
	heldPeak    int
	capHeldPeak int
	lentSeen    map[int64]bool
	errs        int
}

// watchFairShare samples fair share until the returned stop is called.
func (s *system) watchFairShare(ctx context.Context) (*fairShareWatch, func()) {
	w := &fairShareWatch{lentSeen: map[int64]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			var (
				held, capHeld int
				lent          []int64
			)
			err := s.pool.QueryRow(ctx, `
				SELECT count(*)::int, (count(*) FILTER (WHERE metadata ? $2))::int,
				       coalesce((SELECT array_agg(id) FROM river_job WHERE state = 'available' AND metadata ? $1), '{}')
				FROM river_job WHERE `+heldSQL,
				jobmeta.LentFrom, jobmeta.CapHeldAt).Scan(&held, &capHeld, &lent)
			w.mu.Lock()
			if err != nil && ctx.Err() == nil {
				w.errs++
			}
			w.heldPeak = max(w.heldPeak, held)
			w.capHeldPeak = max(w.capHeldPeak, capHeld)
			for _, id := range lent {
				w.lentSeen[id] = true
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return w, func() { cancel(); wg.Wait() }
}

// returned counts the jobs the watch saw lent that are no longer lent: a
// lending pass moved them back to their default queue unstarted, because
// paid work waited (at least that many: a job lent and returned between
// two samples is not seen).
func (s *system) returned(ctx context.Context, w *fairShareWatch) int {
	s.t.Helper()
	w.mu.Lock()
	ids := make([]int64, 0, len(w.lentSeen))
	for id := range w.lentSeen {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	var n int
	require.NoError(s.t, s.pool.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT id, metadata FROM river_job WHERE id = ANY($1)
			UNION ALL
			SELECT job_id, metadata FROM dead_letter_jobs WHERE job_id = ANY($1)) AS j
		WHERE NOT j.metadata ? $2`, ids, jobmeta.LentFrom).Scan(&n))
	return n
}

// leader returns the client ID holding River's leadership, or "".
func (s *system) leader(ctx context.Context) string {
	var id string
	_ = s.pool.QueryRow(ctx, `SELECT leader_id FROM river_leader WHERE expires_at > now()`).Scan(&id)
	return id
}

// waitLeader waits until one of the schedulers leads and returns it.
func (s *system) waitLeader(ctx context.Context, among ...*proc) *proc {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		id := s.leader(ctx)
		for _, p := range among {
			if p.clientID == id && p.alive() {
				return p
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("no leader among the schedulers after 60s (river_leader: %q)", s.leader(ctx))
	return nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
