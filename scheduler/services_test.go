package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/promtest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
)

// The mailer: a team's own service, which nothing in tierq names. Its kind
// send_mail is worked by its own workers (never started here); its
// maintenance, purge_bounces, is a cron job of the scheduler.
type sendArgs struct{}

func (sendArgs) Kind() string { return "send_mail" }

type sendWorker struct{ river.WorkerDefaults[sendArgs] }

func (*sendWorker) Work(context.Context, *river.Job[sendArgs]) error { return nil }

type purgeArgs struct{}

func (purgeArgs) Kind() string { return "purge_bounces" }

type purgeWorker struct {
	river.WorkerDefaults[purgeArgs]
	runs *atomic.Int32
}

func (w *purgeWorker) Work(context.Context, *river.Job[purgeArgs]) error {
	w.runs.Add(1)
	return nil
}

// TestSchedulerServesAnyService runs the scheduler for a registry of the
// mailer alone: it registers the mailer's kinds, runs its periodic job and
// works its periodic kind, and sweeps the mailer's queues, and no other,
// the reference app's queues included.
func TestSchedulerServesAnyService(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	var purges atomic.Int32
	mailer, err := service.New(&service.Config{
		Name:          "mailer",
		Kinds:         []service.Kind{service.WorkerKind(&sendWorker{})},
		PeriodicJobs:  []*river.PeriodicJob{scheduler.CronJob("purge_bounces", river.PeriodicInterval(time.Hour), purgeArgs{})},
		PeriodicKinds: []service.Kind{service.WorkerKind(&purgeWorker{runs: &purges})},
	})
	require.NoError(t, err)
	services, err := service.NewRegistry(mailer)
	require.NoError(t, err)

	cfg := schedulerConfig(t, db,
		"AGING_INTERVAL=1s", "AGING_STEP=1m", "AGING_MAX_PRIORITY=2",
		"ESCALATION_INTERVAL=1s", "ESCALATE_SCHEDULED_AFTER=1h", "ESCALATE_DEFAULT_AFTER=3h")
	reg := prometheus.NewRegistry()
	riverConfig, err := scheduler.RiverConfig(runConfig(t, cfg, discard, func(*pgxpool.Pool) (*service.Registry, error) { return services, nil }), db.Pool, services, metrics.NewScheduler(reg, services.Queues()))
	require.NoError(t, err)
	require.Equal(t, []string{"aging_sweep", "dlq_drain", "escalation_sweep", "purge_bounces", "send_mail"},
		registeredKinds(t, riverConfig.Workers), "the mailer's kinds, its periodic kind and the scheduler's own")

	waiting := func(queue string, priority int, wait time.Duration) int64 {
		return testdb.InsertRaw(t, db, testdb.RawJob{Kind: "send_mail", Queue: queue, Priority: priority, Wait: wait})
	}
	background := waiting("mailer_scheduled", 2, 2*time.Hour)
	paid := waiting("mailer_priority", 4, 10*time.Minute)
	analysisBackground := testdb.InsertRaw(t, db, testdb.RawJob{Kind: "loadtest", Queue: "analysis_scheduled", Priority: 2, Wait: 2 * time.Hour})
	analysisPaid := testdb.InsertRaw(t, db, testdb.RawJob{Kind: "loadtest", Queue: "analysis_priority", Wait: 10 * time.Minute})

	db.Start(t, riverConfig)
	testdb.WaitFor(t, 20*time.Second, "the mailer's jobs swept and its maintenance run", func() bool {
		moved := db.Jobs(t, "id = $1", background)[0]
		// The moved job ages from when it became due: at the cap at once.
		return moved.Queue == "mailer_default" && moved.Priority == 2 &&
			db.Jobs(t, "id = $1", paid)[0].Priority == 2 &&
			db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'purge_bounces' AND queue = $1 AND state = 'completed'`, scheduler.Queue) == 1
	})
	require.Equal(t, int32(1), purges.Load(), "worked here, once")
	// A few more sweeps: the reference app's queues are no service's here.
	sweeps := db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, scheduler.KindAgingSweep)
	testdb.WaitFor(t, 10*time.Second, "two more aging sweeps", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, scheduler.KindAgingSweep) >= sweeps+2
	})
	require.Equal(t, testdb.Job{ID: analysisBackground, Kind: "loadtest", Queue: "analysis_scheduled", State: "available", Priority: 2},
		db.Jobs(t, "id = $1", analysisBackground)[0])
	require.Equal(t, testdb.Job{ID: analysisPaid, Kind: "loadtest", Queue: "analysis_priority", State: "available", Priority: 4},
		db.Jobs(t, "id = $1", analysisPaid)[0])

	promotions := promtest.Values(t, reg, "tierq_aging_promotions_total")
	require.Equal(t, map[string]float64{
		"tierq_aging_promotions_total{queue=mailer_priority}":  1,
		"tierq_aging_promotions_total{queue=mailer_default}":   1,
		"tierq_aging_promotions_total{queue=mailer_scheduled}": 0,
	}, promotions)
}

// TestRiverConfigRefusesAKindOfTheScheduler: a service may not take one of
// the scheduler's own kinds.
func TestRiverConfigRefusesAKindOfTheScheduler(t *testing.T) {
	t.Parallel()
	clash, err := service.New(&service.Config{Name: "clash", Kinds: []service.Kind{service.WorkerKind(&agingImpostor{})}})
	require.NoError(t, err)
	services, err := service.NewRegistry(clash)
	require.NoError(t, err)
	cfg := schedulerConfig(t, testdb.New(t))
	_, err = scheduler.RiverConfig(runConfig(t, cfg, discard, func(*pgxpool.Pool) (*service.Registry, error) { return services, nil }), nil, services, metrics.NewScheduler(prometheus.NewRegistry(), services.Queues()))
	require.ErrorContains(t, err, scheduler.KindAgingSweep)
}

// agingImpostor works a kind named as the scheduler's aging sweep.
type agingImpostor struct {
	river.WorkerDefaults[scheduler.AgingSweepArgs]
}

func (*agingImpostor) Work(context.Context, *river.Job[scheduler.AgingSweepArgs]) error { return nil }
