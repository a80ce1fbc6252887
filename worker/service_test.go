package worker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
	"github.com/tierq/tierq/worker"
)

// A team's own service: kind send_mail in the queues mail_priority,
// mail_default and mail_scheduled.
type sendArgs struct {
	To string `json:"to"`
}

func (sendArgs) Kind() string { return "send_mail" }

type sendWorker struct {
	river.WorkerDefaults[sendArgs]
	pool *pgxpool.Pool // what a team's worker would hold; nil when it only describes the service
}

func (*sendWorker) Work(context.Context, *river.Job[sendArgs]) error { return nil }

func newMailer(t testing.TB, pool *pgxpool.Pool, baseQueue string) *service.Service {
	t.Helper()
	mailer, err := service.New(&service.Config{
		Name:      "mailer",
		BaseQueue: baseQueue,
		Kinds:     []service.Kind{service.WorkerKind(&sendWorker{pool: pool})},
		Workers:   &service.ClassWorkers{Priority: 2, Default: 1, Scheduled: 1},
	})
	require.NoError(t, err)
	return mailer
}

func newRegistry(t testing.TB, services ...*service.Service) *service.Registry {
	t.Helper()
	r, err := service.NewRegistry(services...)
	require.NoError(t, err)
	return r
}

// loadTestArgs claims the load-test workload's kind.
type loadTestArgs struct{}

func (loadTestArgs) Kind() string { return jobs.KindLoadTest }

type loadTestWorker struct {
	river.WorkerDefaults[loadTestArgs]
}

func (*loadTestWorker) Work(context.Context, *river.Job[loadTestArgs]) error { return nil }

// TestRiverConfigOfAnotherService: RiverConfig serves any registered
// service, with the counts its variables set, and refuses a registry that
// does not match the configuration.
func TestRiverConfigOfAnotherService(t *testing.T) {
	t.Parallel()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	described := newRegistry(t, newMailer(t, nil, "mail"))
	cfg, err := config.LoadWorker([]string{
		"DATABASE_URL=postgres://localhost/app", "DATABASE_SCHEMA=app", "WORKER_SERVICE=mailer",
		"MAILER_QUEUE_PRIORITY_WORKERS=6", "MAILER_QUEUE_SCHEDULED_WORKERS=0",
	}, described)
	require.NoError(t, err)

	t.Run("queues, counts and kinds", func(t *testing.T) {
		t.Parallel()
		rc, err := riverConfig(cfg, described, newRegistry(t, newMailer(t, nil, "mail")), nil, discard)
		require.NoError(t, err)
		require.Equal(t, map[string]river.QueueConfig{
			"mail_priority": {MaxWorkers: 6, FetchCooldown: time.Millisecond, FetchPollInterval: 250 * time.Millisecond},
			"mail_default":  {MaxWorkers: 1, FetchCooldown: 100 * time.Millisecond, FetchPollInterval: time.Second},
		}, rc.Queues)
		require.True(t, rc.FetchOnlyKnownKinds)
		require.True(t, rc.LeaderElectionDisabled)
		require.Equal(t, "app", rc.Schema)
		require.NotNil(t, rc.Workers)
	})

	t.Run("service not registered", func(t *testing.T) {
		t.Parallel()
		reference, err := jobs.Registry(jobs.Deps{})
		require.NoError(t, err)
		_, err = riverConfig(cfg, described, reference, nil, discard)
		require.EqualError(t, err, `worker: service "mailer" is not registered (registered: analyzer, specgen)`)
	})

	t.Run("other queues than loaded with", func(t *testing.T) {
		t.Parallel()
		_, err := riverConfig(cfg, described, newRegistry(t, newMailer(t, nil, "post")), nil, discard)
		require.ErrorContains(t, err, "is not one of service mailer's (post_priority, post_default, post_scheduled): the configuration was made with another registry")
	})

	// The kinds fetched come from the registry the configuration was made
	// with (FetchedKinds); the one given must have the same.
	t.Run("other kinds than loaded with", func(t *testing.T) {
		t.Parallel()
		other, err := service.New(&service.Config{Name: "mailer", BaseQueue: "mail", Kinds: []service.Kind{service.WorkerKind(&loadTestWorker{})}})
		require.NoError(t, err)
		_, err = riverConfig(cfg, described, newRegistry(t, other), nil, discard)
		require.ErrorContains(t, err, "worker: service mailer fetches kinds "+jobs.KindLoadTest+" in the registry given, ")
		require.ErrorContains(t, err, "in Config.Registry: the configuration was made with another registry")
	})

	t.Run("kind taken by the load-test workload", func(t *testing.T) {
		t.Parallel()
		claims, err := service.New(&service.Config{Name: "mailer", BaseQueue: "mail", Kinds: []service.Kind{service.WorkerKind(&loadTestWorker{})}})
		require.NoError(t, err)
		claimsRegistry := newRegistry(t, claims)
		claimsCfg, err := config.LoadWorker([]string{"DATABASE_URL=postgres://localhost/app", "WORKER_SERVICE=mailer", "LOAD_TEST_WORKLOAD=true"}, claimsRegistry)
		require.NoError(t, err)
		_, err = riverConfig(claimsCfg, claimsRegistry, claimsRegistry, nil, discard)
		require.ErrorContains(t, err, "worker: load-test workload")
		require.ErrorContains(t, err, jobs.KindLoadTest)
	})
}

// TestRunServesAnotherService runs a worker deployment of a team's own
// service through Run, as a team's main would: it works the service's jobs
// in its queues, leaves another service's kind alone, warns that
// JOB_TIMEOUT, set, bounds none of its kinds, and returns nil once its
// context ends.
func TestRunServesAnotherService(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	newServices := func(pool *pgxpool.Pool) (*service.Registry, error) {
		return service.NewRegistry(newMailer(t, pool, "mail"))
	}
	described, err := newServices(nil)
	require.NoError(t, err)
	cfg, err := config.LoadWorker([]string{
		"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema, "WORKER_SERVICE=mailer",
		"MAILER_QUEUE_DEFAULT_WORKERS=0", "JOB_TIMEOUT=30s",
		"QUEUE_PRIORITY_FETCH_POLL_INTERVAL=50ms", "QUEUE_SCHEDULED_FETCH_COOLDOWN=10ms", "QUEUE_SCHEDULED_FETCH_POLL_INTERVAL=50ms",
	}, described)
	require.NoError(t, err)

	producer := db.Producer(t)
	mailer, _ := described.Lookup("mailer")
	paid, err := producer.Insert(ctx, sendArgs{To: "a@example.com"}, mailer.InsertOpts(tiers.Pro, "u_1", false))
	require.NoError(t, err)
	require.Equal(t, "mail_priority", paid.Job.Queue)
	background, err := producer.Insert(ctx, sendArgs{To: "b@example.com"}, mailer.InsertOpts(tiers.Free, "u_2", true))
	require.NoError(t, err)
	require.Equal(t, "mail_scheduled", background.Job.Queue)
	// A kind the deployment does not work, in one of its queues.
	stray, err := producer.Insert(ctx, jobs.LoadTestArgs{}, &river.InsertOpts{Queue: "mail_priority"})
	require.NoError(t, err)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &proctest.Buffer{}
	done := make(chan error, 1)
	runCfg := runConfig(t, cfg, described, slog.New(slog.NewTextHandler(out, nil)), newServices)
	go func() { done <- worker.Run(runCtx, runCfg) }()

	testdb.WaitFor(t, 20*time.Second, "both mails sent", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'completed'`,
			[]int64{paid.Job.ID, background.Job.ID}) == 2
	})
	require.Equal(t, "available", db.Jobs(t, "id = $1", stray.Job.ID)[0].State, "not a kind of the mailer")

	proctest.WaitReturn(t, cancel, done, out)
	require.Contains(t, out.String(), "worker started")
	require.Contains(t, out.String(), "service=mailer")
	require.Contains(t, out.String(), "mail_priority=2")
	require.Contains(t, out.String(), "mail_scheduled=1")
	require.NotContains(t, out.String(), "mail_default=")
	require.Contains(t, out.String(), `level=WARN msg="JobTimeout no longer bounds tierq's jobs: every kind made with service.WorkerKind has its own timeout`)
	require.Contains(t, out.String(), "job_timeout=30s kind_timeouts=map[send_mail:1m0s]")
	require.Contains(t, out.String(), "worker stopped")

	// The jobs' waits, recorded for the console (flushed at the stop at the
	// latest): one per job, by queue and tier.
	rows, err := db.Pool.Query(ctx, `SELECT queue || ' ' || tier || ' ' || (SELECT sum(c) FROM unnest(counts) AS c) FROM job_wait_stats ORDER BY queue`)
	require.NoError(t, err)
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"mail_priority pro 1", "mail_scheduled free 1"}, recorded)
}

// TestRunRefusesOtherServices: the services Config.NewServices builds must
// be Config.Registry's; Run fails naming both before its client starts.
func TestRunRefusesOtherServices(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	described := newRegistry(t, newMailer(t, nil, "mail"))
	cfg, err := config.LoadWorker([]string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema, "WORKER_SERVICE=mailer"}, described)
	require.NoError(t, err)
	runCfg := runConfig(t, cfg, described, slog.New(slog.DiscardHandler), func(pool *pgxpool.Pool) (*service.Registry, error) {
		reference, err := jobs.Registry(jobs.Deps{Pool: pool})
		if err != nil {
			return nil, err
		}
		return reference.Join(newRegistry(t, newMailer(t, pool, "mail")))
	})
	err = worker.Run(context.Background(), runCfg)
	require.EqualError(t, err, "worker: Config.NewServices built services analyzer, mailer, specgen, Config.Registry has mailer: they must be the same services")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM tierq_services`), "nothing recorded")
}
