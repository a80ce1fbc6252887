package scheduler_test

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/scheduler"
)

// wantTimeouts is every kind the reference app's scheduler registers, with
// the timeout it declares (service.Timeout).
var wantTimeouts = map[string]time.Duration{
	"analysis":         time.Minute,
	"specview":         30 * time.Second,
	"loadtest":         time.Minute,
	"aging_sweep":      time.Minute,
	"escalation_sweep": time.Minute,
	"reanalyze_stale":  time.Minute,
	"retention":        time.Minute,
	"dlq_drain":        time.Minute,
}

// registeredKinds lists the kinds in a River worker registry. River has no
// API for it, so this reads its (unexported) map; if River renames it, this
// fails and says so instead of passing on an empty list.
func registeredKinds(t *testing.T, workers *river.Workers) []string {
	t.Helper()
	m := reflect.ValueOf(workers).Elem().FieldByName("workersMap")
	require.True(t, m.IsValid() && m.Kind() == reflect.Map, "river.Workers has no workersMap any more: update registeredKinds")
	var kinds []string
	for _, k := range m.MapKeys() {
		kinds = append(kinds, k.String())
	}
	slices.Sort(kinds)
	require.NotEmpty(t, kinds)
	return kinds
}

// TestEveryRegisteredKindHasATimeout: every kind the scheduler registers
// is in Timeouts, read from the kinds themselves (the registry's, the
// load-test kind given as ExtraKinds, the scheduler's own), with a positive
// timeout, and nothing else is: a kind cannot be registered without one.
func TestEveryRegisteredKindHasATimeout(t *testing.T) {
	t.Parallel()

	cfg, err := config.Load[config.Scheduler]([]string{"DATABASE_URL=postgres://127.0.0.1:1/none"})
	require.NoError(t, err)
	riverConfig := riverConfig(t, cfg, nil, discard, newMetrics(t, prometheus.NewRegistry()))

	// The kinds cmd/scheduler registers, with their timeouts as it checks
	// them.
	maintenance, err := jobsconfig.LoadMaintenance(nil, &cfg)
	require.NoError(t, err)
	services, err := jobs.Registry(jobs.Deps{Maintenance: maintenance})
	require.NoError(t, err)
	timeouts := scheduler.Timeouts(services, jobs.LoadTestKind(nil))
	require.Equal(t, slices.Sorted(maps.Keys(timeouts)), registeredKinds(t, riverConfig.Workers), "kinds registered and kinds with a timeout")
	for kind, timeout := range timeouts {
		require.Positive(t, timeout, kind)
	}
	require.Equal(t, wantTimeouts, timeouts)
	// The default rescue threshold is above all of them.
	require.NoError(t, cfg.CheckKindTimeouts(timeouts))
	// The depth alert's webhook call, the last step of a drain, leaves the
	// drain at least half of its job's timeout.
	require.LessOrEqual(t, 2*config.MaxDLQAlertTimeout, timeouts[scheduler.KindDLQDrain])

	// Without services: the scheduler's own kinds.
	require.Equal(t, map[string]time.Duration{"aging_sweep": time.Minute, "escalation_sweep": time.Minute, "dlq_drain": time.Minute},
		scheduler.Timeouts(nil))
}

// TestRescuerWaitsForEachKindsOwnTimeout is the double run of issue 14: the
// leading scheduler's JOB_TIMEOUT (1 s) and RESCUE_STUCK_JOBS_AFTER (2 s)
// are far shorter than the time a worker has been running a job. Such a job
// is not rescued while it is within its kind's own timeout, whatever the
// leader's settings; past that timeout, it is.
//
// The jobs are river_job rows written as a worker leaves them (running,
// attempted half a timeout, or a timeout and 15 s, ago, by a worker that is
// gone); the leader is the scheduler's real River client, whose rescuer
// runs as soon as it leads and then every 30 s. The scheduler would refuse
// these settings at start (RESCUE_STUCK_JOBS_AFTER must exceed every
// kind's timeout); RiverConfig is used directly to show that even then a
// kind's timeout protects its running jobs: the rescuer reads each kind's
// from the kind (service.Timeout, or service.DefaultTimeout), never the
// leader's JOB_TIMEOUT, as the worker running the job does. One pass of the rescuer decides both rows of every kind (one
// query fetches every running job older than 2 s), so once the expired
// rows are rescued, the others have been looked at and left alone.
func TestRescuerWaitsForEachKindsOwnTimeout(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	insertRunning := func(kind string, age time.Duration) int64 {
		t.Helper()
		var id int64
		// A queue nobody works, so a rescued job waits there.
		require.NoError(t, db.Pool.QueryRow(ctx, `
			INSERT INTO river_job (kind, queue, state, args, metadata, priority, max_attempts, attempt,
			                       attempted_at, attempted_by, scheduled_at, created_at)
			VALUES ($1, 'rescue_test', 'running', '{}', '{}', 2, 5, 1,
			        now() - make_interval(secs => $2), '{gone_worker}', now() - make_interval(secs => $2), now() - make_interval(secs => $2))
			RETURNING id`, kind, age.Seconds()).Scan(&id))
		return id
	}
	var within, expired []int64
	for kind, timeout := range wantTimeouts {
		within = append(within, insertRunning(kind, timeout/2))
		expired = append(expired, insertRunning(kind, timeout+15*time.Second))
	}

	startScheduler(t, db, schedulerConfig(t, db, "JOB_TIMEOUT=1s", "RESCUE_STUCK_JOBS_AFTER=2s"))
	testdb.WaitFor(t, 20*time.Second, "the rescuer to retry every job past its kind's timeout", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'retryable'
			AND errors[array_length(errors, 1)]->>'error' = 'Stuck job rescued by JobRescuer'`, expired) == len(expired)
	})

	rows, err := db.Pool.Query(ctx, `SELECT kind, state::text FROM river_job WHERE id = ANY($1)`, within)
	require.NoError(t, err)
	states := map[string]string{}
	for rows.Next() {
		var kind, state string
		require.NoError(t, rows.Scan(&kind, &state))
		states[kind] = state
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{
		"analysis": "running", "specview": "running", "loadtest": "running",
		"aging_sweep": "running", "escalation_sweep": "running", "reanalyze_stale": "running",
		"retention": "running", "dlq_drain": "running",
	}, states, "jobs within their kind's timeout, rescued or not")
}
