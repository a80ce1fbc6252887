package scheduler_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// exportArgs are the args of a kind of no service, which a deployment
// registers with Config.ExtraKinds (as cmd/scheduler does the load test's).
type exportArgs struct{}

func (exportArgs) Kind() string { return "audit_export" }

type exportWorker struct {
	river.WorkerDefaults[exportArgs]
	pool *pgxpool.Pool
}

func (*exportWorker) Work(context.Context, *river.Job[exportArgs]) error { return nil }

// TestRun runs the scheduler deployment through Run, as a team's main
// would.
func TestRun(t *testing.T) {
	t.Parallel()

	// A scheduler of the mailer alone (services_test.go) and of an extra
	// worker: it leads, runs and works the mailer's periodic job and the
	// extra kind, serves tierq_leader on METRICS_ADDR and returns nil once
	// its context ends.
	t.Run("team services and extra workers", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)

		var purges atomic.Int32
		var servicesPool, extraPool *pgxpool.Pool
		newServices := func(pool *pgxpool.Pool) (*service.Registry, error) {
			servicesPool = pool
			mailer, err := service.New(&service.Config{
				Name:          "mailer",
				Kinds:         []service.Kind{service.WorkerKind(&sendWorker{}, service.Timeout[sendArgs](2*time.Minute))},
				PeriodicJobs:  []*river.PeriodicJob{scheduler.CronJob("purge_bounces", river.PeriodicInterval(time.Hour), purgeArgs{})},
				PeriodicKinds: []service.Kind{service.WorkerKind(&purgeWorker{runs: &purges})},
			})
			if err != nil {
				return nil, err
			}
			return service.NewRegistry(mailer)
		}
		export := testdb.InsertRaw(t, db, testdb.RawJob{Kind: "audit_export", Queue: scheduler.Queue})

		cfg := schedulerConfig(t, db, "METRICS_ADDR=127.0.0.1:0", "SOFT_STOP_TIMEOUT=1s", "JOB_TIMEOUT=30s")
		out := &proctest.Buffer{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		runCfg := runConfig(t, cfg, slog.New(slog.NewTextHandler(out, nil)), newServices)
		runCfg.ExtraKinds = func(pool *pgxpool.Pool) []service.Kind {
			extraPool = pool // nil from Validate, then Run's
			return []service.Kind{service.WorkerKind(&exportWorker{pool: pool}, service.Timeout[exportArgs](3*time.Minute))}
		}
		runCfg.Limits = limits.Config{Services: map[string]limits.Tiers{"mailer": {tiers.Free: {MaxRunning: 1, DailyQuota: 100}}}}
		go func() { done <- scheduler.Run(ctx, runCfg) }()

		proctest.WaitOutput(t, out, "scheduler started", 20*time.Second)
		require.Contains(t, out.String(), "rescue_stuck_jobs_after=1h0m0s")
		// The tenant limits, recorded before the client started.
		require.Contains(t, out.String(), `tenant_limits="mailer free max_running=1 daily_quota=100"`)
		recorded, ok, err := limits.ReadService(ctx, db.Pool, "mailer")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "scheduler", recorded.RecordedBy)
		require.Equal(t, limits.Tiers{tiers.Free: {MaxRunning: 1, DailyQuota: 100}, tiers.Pro: {}, tiers.ProPlus: {}, tiers.Enterprise: {}}, recorded.Tiers)
		require.Contains(t, out.String(), `level=WARN msg="JobTimeout no longer bounds tierq's jobs`)
		require.Contains(t, out.String(), "kind_timeouts=\"map[aging_sweep:1m0s audit_export:3m0s dlq_drain:1m0s escalation_sweep:1m0s purge_bounces:1m0s send_mail:2m0s]\"",
			"every kind's timeout, from the kinds themselves: purge_bounces declares none and has the default")
		metricsURL := proctest.MetricsURL(t, out)
		testdb.WaitFor(t, 20*time.Second, "the purge cron job to run and the extra kind to be worked", func() bool {
			return purges.Load() >= 1 && db.Jobs(t, "id = $1", export)[0].State == "completed"
		})
		testdb.WaitFor(t, 5*time.Second, "tierq_leader 1", func() bool {
			return strings.Contains(proctest.Scrape(t, metricsURL), "\ntierq_leader 1\n")
		})
		require.NotNil(t, servicesPool)
		require.Same(t, servicesPool, extraPool, "the services and the extra workers get the deployment's pool")

		proctest.WaitReturn(t, cancel, done, out)
		require.Contains(t, out.String(), "scheduler stopped")
	})

	// RESCUE_STUCK_JOBS_AFTER not longer than a kind's timeout, the
	// scheduler's own, a service's kind or periodic kind, or one of
	// ExtraKinds (or of the deprecated AddKinds: several add up), is
	// config.ErrInvalid, once Run has built the services and before its
	// River client starts: no job is worked.
	t.Run("rescue not above a kind's timeout", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)

		const prefix = `invalid configuration: RESCUE_STUCK_JOBS_AFTER="%s": must be longer than the timeout of every job kind, ` +
			`or the rescuer retries (and runs twice) jobs a worker may still be running; job kind `
		mailer := func(send, purge time.Duration) func(*pgxpool.Pool) (*service.Registry, error) {
			return func(*pgxpool.Pool) (*service.Registry, error) {
				svc, err := service.New(&service.Config{
					Name:          "mailer",
					Kinds:         []service.Kind{service.WorkerKind(&sendWorker{}, service.Timeout[sendArgs](send))},
					PeriodicKinds: []service.Kind{service.WorkerKind(&purgeWorker{runs: &atomic.Int32{}}, service.Timeout[purgeArgs](purge))},
				})
				if err != nil {
					return nil, err
				}
				return service.NewRegistry(svc)
			}
		}
		export := func(timeout time.Duration) func(*pgxpool.Pool) []service.Kind {
			return func(pool *pgxpool.Pool) []service.Kind {
				return []service.Kind{service.WorkerKind(&exportWorker{pool: pool}, service.Timeout[exportArgs](timeout))}
			}
		}
		tests := []struct {
			name        string
			rescue      string
			newServices func(*pgxpool.Pool) (*service.Registry, error)
			extraKinds  func(*pgxpool.Pool) []service.Kind
			opts        []scheduler.RunOption
			want        string
		}{
			{
				name:        "the scheduler's own",
				rescue:      "60s",
				newServices: mailer(30*time.Second, 30*time.Second),
				want:        "aging_sweep has 1m0s, job kind dlq_drain has 1m0s, job kind escalation_sweep has 1m0s",
			},
			{
				name:        "a service's kind",
				rescue:      "90s",
				newServices: mailer(2*time.Minute, time.Minute),
				want:        "send_mail has 2m0s",
			},
			{
				name:        "a periodic kind",
				rescue:      "90s",
				newServices: mailer(time.Minute, 5*time.Minute),
				want:        "purge_bounces has 5m0s",
			},
			{
				name:        "an extra kind",
				rescue:      "90s",
				newServices: mailer(2*time.Minute, time.Minute),
				extraKinds:  export(3 * time.Minute),
				want:        "audit_export has 3m0s, job kind send_mail has 2m0s",
			},
			{
				name:        "options add up",
				rescue:      "90s",
				newServices: mailer(2*time.Minute, time.Minute),
				opts:        []scheduler.RunOption{scheduler.AddKinds(export(3 * time.Minute)), scheduler.AddKinds(func(*pgxpool.Pool) []service.Kind { return nil })},
				want:        "audit_export has 3m0s, job kind send_mail has 2m0s",
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				cfg := schedulerConfig(t, db, "RESCUE_STUCK_JOBS_AFTER="+tt.rescue, "JOB_TIMEOUT=30s")
				runCfg := runConfig(t, cfg, discard, tt.newServices)
				runCfg.ExtraKinds = tt.extraKinds
				err := scheduler.Run(context.Background(), runCfg, tt.opts...)
				var kinds *scheduler.KindTimeoutsError
				require.ErrorAs(t, err, &kinds)
				err = cfg.RunError(err)
				require.ErrorIs(t, err, config.ErrInvalid)
				require.Equal(t, strings.ReplaceAll(prefix, "%s", tt.rescue)+tt.want, err.Error())
			})
		}
		// Checked on the Config's own value: shortened after translation
		// from an environment that passes, it fails.
		t.Run("edited after translation", func(t *testing.T) {
			t.Parallel()
			cfg := schedulerConfig(t, db, "RESCUE_STUCK_JOBS_AFTER=2h", "JOB_TIMEOUT=30s")
			runCfg := runConfig(t, cfg, discard, mailer(time.Hour, time.Minute))
			runCfg.RescueStuckJobsAfter = 30 * time.Minute
			err := scheduler.Run(context.Background(), runCfg)
			var kinds *scheduler.KindTimeoutsError
			require.ErrorAs(t, err, &kinds)
			require.Equal(t, []string{"send_mail has 1h0m0s"}, kinds.Over)
			require.Equal(t, strings.ReplaceAll(prefix, "%s", "30m0s")+"send_mail has 1h0m0s", cfg.RunError(err).Error())
		})
		// NewServices must build Registry's services.
		t.Run("services not the Registry's", func(t *testing.T) {
			t.Parallel()
			cfg := schedulerConfig(t, db, "JOB_TIMEOUT=30s")
			runCfg := runConfig(t, cfg, discard, mailer(time.Minute, time.Minute))
			runCfg.Registry = testdb.Registry(t)
			err := scheduler.Run(context.Background(), runCfg)
			require.EqualError(t, err, "scheduler: Config.NewServices built services mailer, Config.Registry has analyzer, specgen: they must be the same services")
		})
		require.Zero(t, db.Count(t, `SELECT count(*) FROM river_leader`), "no scheduler led")
	})
}
