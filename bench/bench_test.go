package bench_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/bench"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/examples/thumbnail"
	thumbnailapp "github.com/tierq/tierq/examples/thumbnail/app"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/refapp"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

// The scaleout scenario's worker processes are this test binary run as the
// reference app's worker process, as cmd/worker runs it (internal/proctest);
// the traffic scenario's processes are it run as the role its
// appRoleEnv names (trafficApp).
func TestMain(m *testing.M) {
	proctest.RunMain(func() {
		ctx, environ := context.Background(), os.Environ()
		switch os.Getenv(appRoleEnv) {
		case string(bench.RoleScheduler):
			config.Exit("scheduler", thumbnailapp.RunSchedulerWithReference(ctx, environ, os.Stdout))
		case string(bench.RoleAPI):
			config.Exit("api", thumbnailapp.RunAPIWithReference(ctx, environ, os.Stdout))
		case thumbnail.ServiceName:
			config.Exit("worker", thumbnailapp.RunWorker(ctx, environ, os.Stdout))
		}
		config.Exit("worker", refapp.RunWorker(ctx, environ, os.Stdout))
	})
	os.Exit(m.Run())
}

// TestEveryScenarioRunsAndCleansUp runs each scenario at tiny sizes against
// the test server: every code path (clients, seeds, sweeps, drains, replays,
// inserts, the report) works, the results are consistent, and the bench's
// schemas are gone afterwards. It checks no speed: that is what tierctl bench
// is for.
//
// The schemas are counted by a prefix of this run's own: other checkouts may
// run this test against the same database at the same time.
func TestEveryScenarioRunsAndCleansUp(t *testing.T) {
	db := testdb.New(t) // creates the test database if needed
	ctx := context.Background()
	prefix := schemaPrefix(t)
	benchSchemas := func() int {
		return db.Count(t, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix+"_")
	}
	before := benchSchemas()

	registry := testdb.Registry(t)
	analyzer, ok := registry.Lookup(jobs.ServiceAnalyzer)
	require.True(t, ok)
	opts := bench.Tiny(bench.Options{
		DatabaseURL: testdb.URL(), Service: analyzer, Registry: registry,
		ProducerArgs: func(run, i int) river.JobArgs {
			return jobs.AnalysisArgs{Target: fmt.Sprintf("/bench/%d/%d", run, i), UserID: "bench"}
		},
	}, prefix)
	scenarios := []string{"isolation", "throughput", "sweeps", "dlq", "insert", "fairness", "lending", "realistic"}
	reports := make([]bench.Report, len(scenarios))
	ran := t.Run("scenarios", func(t *testing.T) {
		for k, s := range scenarios {
			t.Run(s, func(t *testing.T) {
				t.Parallel() // each in a schema of its own
				require.NoError(t, bench.Run(ctx, s, opts, &reports[k]))
			})
		}
	})
	require.True(t, ran, "a scenario failed: its report is empty")
	require.Equal(t, before, benchSchemas(), "every scenario drops its schema")
	r := bench.Report{
		Isolation: reports[0].Isolation, Throughput: reports[1].Throughput, Sweeps: reports[2].Sweeps,
		DLQ: reports[3].DLQ, Insert: reports[4].Insert, Fairness: reports[5].Fairness,
		Lending: reports[6].Lending, Realistic: reports[7].Realistic,
	}
	for _, rep := range reports {
		r.Targets = append(r.Targets, rep.Targets...)
	}

	i := r.Isolation
	require.Equal(t, 20, i.Jobs, "one job per 50ms for 1s")
	for phase, samples := range i.Samples {
		switch phase {
		case "tierq concurrent producers", "floor concurrent producers", "tierq concurrent producers via Client.Insert":
			require.Len(t, samples, 16*i.Jobs, phase)
		case "tierq paid saturated": // a third of the stream's duration
			require.Len(t, samples, 16*(i.Jobs/3), phase)
		default:
			require.Len(t, samples, i.Jobs, phase)
		}
		if strings.HasPrefix(phase, "floor") {
			// The floor stamps a claim after the row's commit (floor.go).
			require.Positive(t, samples[0], phase)
		}
		// River stamps attempted_at with its fetch statement's start, which
		// can precede the commit of a job that statement claims, so one
		// sample of many producers can come out slightly negative; the
		// phase's median cannot.
		require.Positive(t, samples[len(samples)/2], phase)
	}
	require.Len(t, i.Samples, 13)
	require.Len(t, i.Splits, 10, "every phase but the floors")
	for phase, sp := range i.Splits {
		// The commit part spans at least the insert statement and the
		// commit's round trips, on one clock.
		require.Positive(t, sp.CommitP99Ms, phase)
		require.Positive(t, sp.TailCommitMs, phase)
	}
	require.Positive(t, i.FloorP50Ms)
	require.GreaterOrEqual(t, i.FloorP99Ms, i.FloorP50Ms)
	require.Positive(t, i.FloorConcurrentP50Ms)
	require.GreaterOrEqual(t, i.FloorConcurrentP99Ms, i.FloorConcurrentP50Ms)
	require.Positive(t, i.FloorUnflushedP50Ms)
	require.GreaterOrEqual(t, i.FloorUnflushedP99Ms, i.FloorUnflushedP50Ms)
	require.Positive(t, i.IdleUnflushedP50Ms)
	require.GreaterOrEqual(t, i.IdleUnflushedP99Ms, i.IdleUnflushedP50Ms)
	require.Positive(t, i.IdleNoAdmitterP50Ms)
	require.GreaterOrEqual(t, i.IdleNoAdmitterP99Ms, i.IdleNoAdmitterP50Ms)
	require.Positive(t, i.ConcurrentP50Ms)
	require.GreaterOrEqual(t, i.ConcurrentP99Ms, i.ConcurrentP50Ms)
	require.GreaterOrEqual(t, i.ConcurrentP999Ms, i.ConcurrentP99Ms)
	require.GreaterOrEqual(t, i.ConcurrentMaxMs, i.ConcurrentP999Ms)
	require.Positive(t, i.ConcurrentRiverInsertP50Ms)
	require.GreaterOrEqual(t, i.ConcurrentRiverInsertP99Ms, i.ConcurrentRiverInsertP50Ms)
	require.GreaterOrEqual(t, i.ConcurrentRiverInsertP999Ms, i.ConcurrentRiverInsertP99Ms)
	require.GreaterOrEqual(t, i.ConcurrentRiverInsertMaxMs, i.ConcurrentRiverInsertP999Ms)
	require.Positive(t, i.SaturatedP50Ms)
	require.Equal(t, 20, i.SaturatedJobMs)
	require.InDelta(t, 320, i.SaturatedArrivalPerS, 0.01, "16 producers, one job per 50ms each")
	require.InDelta(t, 250, i.SaturatedCapacityPerS, 0.01, "5 priority workers at 20ms a job")
	require.Positive(t, i.IdleFetchesPerS)
	require.LessOrEqual(t, i.IdleFetchesPerS, i.IdleQueriesPerS)
	require.Positive(t, i.BusyFetchesPerS)
	require.Positive(t, i.BusyJobsPerS)
	require.InDelta(t, i.BusyJobsPerS/i.BusyFetchesPerS, i.BusyJobsPerFetch, 0.01)
	require.False(t, i.Quick)
	require.Positive(t, i.P50Ms)
	require.GreaterOrEqual(t, i.P99Ms, i.P50Ms)
	require.InDelta(t, i.P99Ms/i.P99IdleMs, i.Ratio, 0.01)
	require.Positive(t, i.BacklogLeft, "the backlog lasted the whole stream")
	require.Positive(t, i.BacklogWorked, "and was being worked")
	require.Positive(t, i.IdleQueriesPerS)
	require.Positive(t, i.RiverDefaultsIdleQueriesPerS)

	tp := r.Throughput
	require.Positive(t, tp.TierqJobsPerS)
	require.Positive(t, tp.BareJobsPerS)
	require.InDelta(t, 38, tp.ADRBoundJobsPerS, 0.01, "3/100ms + 2/250ms: the timer-bound queues with the default tuning")
	require.InDelta(t, 5000, tp.ADRFastBoundJobsPerS, 0.01, "5/1ms: the priority queue fetches faster than the timer bounds")
	require.Positive(t, tp.ADRFastJobsPerS)
	require.Positive(t, tp.ADRJobsPerS)

	s := r.Sweeps
	for _, v := range []float64{s.AgingSmallMs, s.AgingLargeMs, s.EscalationSmallMs, s.EscalationLargeMs, s.DLQSmallMs, s.DLQLargeMs} {
		require.Positive(t, v)
	}

	require.Positive(t, r.DLQ.DrainRowsPerS)
	require.Positive(t, r.DLQ.ReplayRowsPerS)

	in := r.Insert
	require.Zero(t, in.SelectQueueAllocs, "SelectQueue allocates nothing")
	for _, v := range []float64{in.RawOnePerS, in.RoutedOnePerS, in.ProducerOnePerS, in.RiverDefaultsOnePerS, in.RawBatchPerS, in.RoutedBatchPerS} {
		require.Positive(t, v)
	}

	f := r.Fairness
	require.Equal(t, 200, f.Flood)
	require.Equal(t, 40, f.SmallJobs, "four small tenants, one job per 100ms each for 1s")
	require.Equal(t, 300, f.Backlogged)
	require.Equal(t, 1500, f.Alone, "as many as the five backlogged tenants")
	require.Equal(t, 4, f.SnoozeCap, "5 priority workers less one")
	require.InDelta(t, 250, f.CapacityJobsPerS, 0.01, "5 priority workers at 20ms a job")
	require.Len(t, f.Samples, 16, "four latency phases, four small tenants each")
	for phase, samples := range f.Samples {
		require.Len(t, samples, 10, phase)
		require.Positive(t, samples[0], phase)
	}
	for _, pair := range [][2]float64{
		{f.SmallP50Ms, f.SmallP99Ms}, {f.SmallP50OffMs, f.SmallP99OffMs},
		{f.SmallP50IdleMs, f.SmallP99IdleMs}, {f.SnoozeSmallP50Ms, f.SnoozeSmallP99Ms},
	} {
		require.Positive(t, pair[0])
		require.GreaterOrEqual(t, pair[1], pair[0])
	}
	require.InDelta(t, f.SmallP99Ms-f.SmallP99IdleMs, f.GapMs, 0.02)
	require.InDelta(t, f.SmallP99OffMs/f.SmallP99Ms, f.OffRatio, 0.1)
	require.Len(t, f.BackloggedJobs, 5)
	for tenant, n := range f.BackloggedJobs {
		require.Positive(t, n, "tenant %s completed jobs in the window", tenant)
	}
	require.Positive(t, f.BackloggedJobsPerS)
	require.GreaterOrEqual(t, f.JainIndex, 0.2, "1/n at worst")
	require.LessOrEqual(t, f.JainIndex, 1.0)
	require.Positive(t, f.AloneJobsPerS)
	require.Positive(t, f.AloneOffJobsPerS)
	require.Positive(t, f.SnoozeAloneJobsPerS)
	require.InDelta(t, f.AloneJobsPerS/f.AloneOffJobsPerS, f.WorkConservingRatio, 0.01)
	require.InDelta(t, f.SnoozeAloneJobsPerS/f.AloneOffJobsPerS, f.SnoozeThroughputRatio, 0.01)
	require.Positive(t, f.SnoozeFloodSnoozes, "the flooding tenant went over the cap")
	require.Positive(t, f.SnoozeAloneSnoozes, "the tenant alone went over the cap")

	l := r.Lending
	require.Equal(t, 5, l.PriorityWorkers)
	require.Equal(t, 3, l.DefaultWorkers)
	require.Equal(t, 1, l.Floor)
	require.Equal(t, 4, l.MaxLent, "5 priority workers less the floor")
	require.InDelta(t, 7.0/3, l.IdealRatio, 0.001, "(3 default + 4 lent) / 3 default workers")
	require.Equal(t, 400, l.Backlog)
	require.Equal(t, 50, l.FreeJobMs)
	require.Equal(t, 20, l.PaidJobMs)
	require.Equal(t, 10, l.PaidJobs, "one paid job per 100ms for 1s")
	require.Positive(t, l.FreeJobsPerS)
	require.Positive(t, l.FreeJobsPerSOff)
	require.Positive(t, l.LentJobsPerS, "lent jobs completed in the window")
	require.LessOrEqual(t, l.LentJobsPerS, l.FreeJobsPerS, "the lent ones are part of the free jobs")
	require.InDelta(t, l.FreeJobsPerS/l.FreeJobsPerSOff, l.FreeDrainRatio, 0.05)
	require.Positive(t, l.LentJobs)
	require.Positive(t, l.MaxLentRunning)
	require.LessOrEqual(t, l.MaxLentRunning, l.MaxLent, "never more lent running than capacity − floor")
	require.LessOrEqual(t, l.PaidMaxLentRunning, l.MaxLent)
	require.Len(t, l.Samples, 2)
	for phase, samples := range l.Samples {
		require.Len(t, samples, l.PaidJobs, phase)
		require.Positive(t, samples[0], phase)
	}
	for _, pair := range [][3]float64{{l.PaidP50Ms, l.PaidP95Ms, l.PaidP99Ms}, {l.PaidP50OffMs, l.PaidP95OffMs, l.PaidP99OffMs}} {
		require.Positive(t, pair[0])
		require.GreaterOrEqual(t, pair[1], pair[0])
		require.GreaterOrEqual(t, pair[2], pair[1])
	}
	require.Positive(t, l.PaidBacklogWorked)
	require.Positive(t, l.PaidBacklogWorkedOff)

	re := r.Realistic
	require.Equal(t, 10, re.OptionBWorkers, "5+3+2: tierq's workers together")
	require.Equal(t, "analysis_all", re.OptionBQueue)
	require.Equal(t, 200, re.Backlog)
	require.Equal(t, 200, re.FreeJobMs)
	require.Equal(t, 10, re.PaidJobs, "one paid job per 100ms for 1s")
	require.Len(t, re.Samples, 3)
	for phase, samples := range re.Samples {
		require.Len(t, samples, re.PaidJobs, phase)
		require.Positive(t, samples[0], phase)
	}
	for _, pair := range [][3]float64{
		{re.PaidP50Ms, re.PaidP95Ms, re.PaidP99Ms}, {re.OptionBPaidP50Ms, re.OptionBPaidP95Ms, re.OptionBPaidP99Ms},
		{re.RiverDefaultsPaidP50Ms, re.RiverDefaultsPaidP95Ms, re.RiverDefaultsPaidP99Ms},
	} {
		require.Positive(t, pair[0])
		require.GreaterOrEqual(t, pair[1], pair[0])
		require.GreaterOrEqual(t, pair[2], pair[1])
	}
	require.InDelta(t, re.PaidP99Ms/re.OptionBPaidP99Ms, re.VsOptionB, 0.01)
	require.InDelta(t, re.PaidP99Ms/re.RiverDefaultsPaidP99Ms, re.VsRiverDefaults, 0.01)
	require.Positive(t, re.BacklogWorked, "the free backlog was worked beside the trickle")
	require.Positive(t, re.OptionBBacklogWorked)
	require.Positive(t, re.RiverDefaultsBacklogWorked)

	require.Len(t, r.Targets, 21)
	raw, err := json.Marshal(r)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	for scenario, want := range map[string][]string{
		"isolation":  {"p50_ms", "p95_ms", "p99_ms", "p99_idle_ms", "ratio", "vs_river_defaults"},
		"throughput": {"tierq_jobs_per_s", "bare_jobs_per_s", "ratio", "adr_jobs_per_s", "adr_bound_ratio"},
		"sweeps":     {"aging_ratio", "escalation_ratio", "dlq_ratio", "aging_small_ms", "aging_large_ms"},
		"fairness": {"small_p99_ms", "small_p99_off_ms", "small_p99_idle_ms", "off_ratio", "jain_index",
			"work_conserving_ratio", "snooze_cap", "snooze_small_p99_ms", "snooze_throughput_ratio"},
		"lending": {"free_drain_ratio", "free_jobs_per_s", "free_jobs_per_s_off", "ideal_ratio", "paid_p99_ms", "paid_p99_off_ms",
			"lent_jobs", "max_lent_running"},
		"realistic": {"paid_p99_ms", "option_b_paid_p99_ms", "river_defaults_paid_p99_ms", "vs_option_b"},
	} {
		section, ok := doc[scenario].(map[string]any)
		require.True(t, ok, scenario)
		for _, k := range want {
			require.Contains(t, section, k, scenario)
		}
	}
	require.NotEmpty(t, r.Rows())
}

// TestScaleoutRunsSeparateWorkerProcesses runs the scaleout scenario at tiny
// sizes (1 and 2 worker processes, each this test binary re-executed as the
// reference app's worker): the processes start, are counted and stop,
// every job ran exactly once, the counts add up, and nothing is left
// behind. No speed is checked. (TestEveryScenarioRunsAndCleansUp runs the
// others.)
func TestScaleoutRunsSeparateWorkerProcesses(t *testing.T) {
	db := testdb.New(t)
	ctx := context.Background()
	prefix := schemaPrefix(t)
	registry := testdb.Registry(t)
	analyzer, ok := registry.Lookup(jobs.ServiceAnalyzer)
	require.True(t, ok)
	opts := bench.Tiny(bench.Options{
		DatabaseURL: testdb.URL(), Service: analyzer, Registry: registry, Runs: 1,
		WorkerCommand: func(environ []string) *exec.Cmd {
			cmd, _ := proctest.Command(t, environ...)
			return cmd
		},
	}, prefix)

	var r bench.Report
	require.NoError(t, bench.Run(ctx, "scaleout", opts, &r))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix+"_"), "the schema is dropped")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE starts_with(application_name, $1)`, prefix+"_"),
		"no worker process is left connected")

	so := r.Scaleout
	require.NotNil(t, so)
	require.Equal(t, map[string]int{"analysis_priority": 5, "analysis_default": 3, "analysis_scheduled": 2}, so.QueueWorkers)
	require.Equal(t, 10, so.WorkersPerProcess)
	require.Equal(t, 20, so.JobMs)
	require.Equal(t, 20, so.PaidJobs, "one paid job per 50ms for 1s")
	require.Equal(t, 1, so.Runs)
	require.Len(t, so.Sizes, 2)
	for k, z := range so.Sizes {
		n := []int{1, 2}[k]
		require.Equal(t, n, z.Processes)
		require.Equal(t, 10*n, z.Workers)
		require.InDelta(t, 500*float64(n), z.SlotBoundJobsPerS, 0.01, "10 workers per process at 20 ms")
		require.InDelta(t, 288*float64(n), z.BoundJobsPerS, 0.01, "5/20ms + 3/100ms + 2/250ms per process")
		require.Zero(t, z.Reruns, "%d processes: every job ran once", n)
		require.Zero(t, z.Unfinished, "%d processes: every job that started completed", n)

		require.Positive(t, z.JobsPerS)
		require.InDelta(t, z.JobsPerS/z.BoundJobsPerS, z.BoundRatio, 0.01)
		require.Len(t, z.ProcessJobsPerS, n)
		var byProcess, byQueue float64
		for _, v := range z.ProcessJobsPerS {
			require.Positive(t, v, "%d processes: every process worked", n)
			byProcess += v
		}
		require.Len(t, z.QueueJobsPerS, 3)
		for queue, v := range z.QueueJobsPerS {
			require.Positive(t, v, "%d processes: queue %s was worked", n, queue)
			byQueue += v
		}
		require.InDelta(t, z.JobsPerS, byProcess, 0.1*float64(n)+0.01, "the processes' jobs add up")
		require.InDelta(t, z.JobsPerS, byQueue, 0.2, "the queues' jobs add up")

		require.Positive(t, z.IdleFetchesPerS, "idle processes poll")
		require.GreaterOrEqual(t, z.IdleStatementsPerS, z.IdleFetchesPerS)
		require.Positive(t, z.BusyFetchesPerS)
		require.GreaterOrEqual(t, z.BusyStatementsPerS, z.BusyFetchesPerS)
		require.InDelta(t, z.JobsPerS/(z.BusyFetchesPerS*float64(n)), z.JobsPerFetch, 0.05)
		require.InDelta(t, z.IdleFetchesPerS, z.IdleStatementKinds["JobGetAvailable"], 0.01, "the fetches are the statements of that kind")
		require.InDelta(t, z.BusyFetchesPerS, z.BusyStatementKinds["JobGetAvailable"], 0.1)
		var busyKinds float64
		for _, v := range z.BusyStatementKinds {
			busyKinds += v
		}
		require.InDelta(t, z.BusyStatementsPerS, busyKinds, 0.5, "every statement has a kind (those under 0.05/s left out)")
		require.GreaterOrEqual(t, z.Connections, 2.0, "a listener and at least one other")
		require.GreaterOrEqual(t, float64(z.MaxConnections), z.Connections)
		require.LessOrEqual(t, z.MaxConnections, 20, "DATABASE_MAX_CONNS")

		require.GreaterOrEqual(t, z.PaidP50Ms, 0.0)
		require.GreaterOrEqual(t, z.PaidP95Ms, z.PaidP50Ms)
		require.GreaterOrEqual(t, z.PaidP99Ms, z.PaidP95Ms)
		samples := so.Samples[fmt.Sprintf("scaleout paid, %d processes", n)]
		require.Len(t, samples, so.PaidJobs)
		for _, v := range samples {
			require.GreaterOrEqual(t, v, 0.0)
		}
		require.Positive(t, z.BacklogWorked, "the free backlog was worked beside the stream")
		require.Positive(t, z.BacklogLeft, "and lasted")
		for _, v := range []float64{z.MachineCores, z.WorkerCores, z.BackendCores, z.BenchCores} {
			require.False(t, math.IsNaN(v))
			require.GreaterOrEqual(t, v, 0.0)
		}
	}
	if _, err := os.Stat("/proc/stat"); err == nil {
		require.Positive(t, so.Sizes[0].MachineCores)
		require.Positive(t, so.Sizes[0].WorkerCores)
	}

	raw, err := json.Marshal(r)
	require.NoError(t, err)
	var doc struct {
		Scaleout struct {
			Sizes []map[string]any `json:"sizes"`
		} `json:"scaleout"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Len(t, doc.Scaleout.Sizes, 2)
	for _, k := range []string{"processes", "jobs_per_s", "slot_bound_jobs_per_s", "bound_ratio", "idle_fetches_per_s",
		"busy_fetches_per_s", "paid_p99_ms", "connections", "machine_cores"} {
		require.Contains(t, doc.Scaleout.Sizes[0], k)
	}
	require.Len(t, so.Table(), 3, "a header and a row per size")
	require.NotEmpty(t, r.Rows())
	require.Empty(t, r.Targets, "a model, not a goal")
}

func TestScaleoutNeedsAWorkerCommand(t *testing.T) {
	t.Parallel()
	var r bench.Report
	err := bench.Run(context.Background(), "scaleout", bench.Options{DatabaseURL: testdb.URL(), Registry: testdb.Registry(t)}, &r)
	require.ErrorContains(t, err, "needs Options.WorkerCommand")
	require.Nil(t, r.Scaleout)
}

// TestScenariosRunForAServiceOfYourOwn runs the scenarios but the longest
// (isolation) on a service that is not the reference app's: the bench names
// none of its own.
func TestScenariosRunForAServiceOfYourOwn(t *testing.T) {
	db := testdb.New(t)
	ctx := context.Background()
	prefix := schemaPrefix(t)
	registry := testdb.MailerRegistry(t)
	opts := bench.Tiny(bench.Options{
		DatabaseURL: testdb.URL(), Registry: registry, // its one service is the default
		ProducerArgs: func(run, i int) river.JobArgs {
			return testdb.SendMailArgs{To: fmt.Sprintf("%d.%d@example.com", run, i)}
		},
		WorkerEnv: []string{"MAILER_QUEUE_SCHEDULED_WORKERS=4"},
	}, prefix)
	scenarios := []string{"throughput", "sweeps", "dlq", "insert"}
	reports := make([]bench.Report, len(scenarios))
	ran := t.Run("scenarios", func(t *testing.T) {
		for k, s := range scenarios {
			t.Run(s, func(t *testing.T) {
				t.Parallel()
				require.NoError(t, bench.Run(ctx, s, opts, &reports[k]))
			})
		}
	})
	require.True(t, ran, "a scenario failed")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix+"_"))
	require.InDelta(t, 46, reports[0].Throughput.ADRBoundJobsPerS, 0.01, "3/100ms + 4/250ms: the default counts, and the scheduled queue's from WorkerEnv")
	require.Positive(t, reports[0].Throughput.TierqJobsPerS)
	require.Positive(t, reports[1].Sweeps.DLQLargeMs)
	require.Positive(t, reports[2].DLQ.ReplayRowsPerS)
	require.Positive(t, reports[3].Insert.ProducerOnePerS)
	require.Zero(t, reports[3].Insert.SelectQueueAllocs)
}

// schemaPrefix is a prefix of the bench's schemas that no other run of the
// tests shares. It is not tierq_bench_: a run of tierctl bench, or of an
// older version of these tests (which counted every tierq_bench_ schema),
// does not see this run's schemas either.
func schemaPrefix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "tierq_benchtest" + hex.EncodeToString(b)
}

func TestCheckWorkerEnvAcceptsEveryServicesWorkerSettings(t *testing.T) {
	t.Parallel()
	registry, err := testdb.Registry(t).Join(testdb.MailerRegistry(t))
	require.NoError(t, err)
	require.NoError(t, bench.CheckWorkerEnv(registry, []string{
		"QUEUE_PRIORITY_FETCH_COOLDOWN=50ms", "ANALYZER_QUEUE_DEFAULT_WORKERS=9",
		"SPECGEN_QUEUE_PRIORITY_WORKERS=1", "MAILER_QUEUE_SCHEDULED_WORKERS=4",
	}))
	for _, kv := range []string{"DATABASE_SCHEMA=public", "WORKER_SERVICE=mailer", "THUMBNAILER_QUEUE_DEFAULT_WORKERS=1"} {
		err := bench.CheckWorkerEnv(registry, []string{kv})
		require.ErrorContains(t, err, "only worker counts and fetch tuning (QUEUE_*, ANALYZER_QUEUE_*, SPECGEN_QUEUE_*, MAILER_QUEUE_*) can be set", kv)
	}
	require.ErrorContains(t, bench.CheckWorkerEnv(registry, []string{"QUEUE_DEFAULT_WORKERS"}), "--set wants NAME=value")
}

func TestScenariosRefuseOptionsWithoutAServiceOfTheRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var r bench.Report
	require.ErrorContains(t, bench.Run(ctx, "sweeps", bench.Options{DatabaseURL: testdb.URL()}, &r), "no service to measure")
	mailer := testdb.MailerRegistry(t).Services()[0]
	require.ErrorContains(t, bench.Run(ctx, "dlq", bench.Options{DatabaseURL: testdb.URL(), Service: mailer, Registry: testdb.Registry(t)}, &r),
		"service mailer is not one of Options.Registry's (analyzer, specgen)")
	require.ErrorContains(t, bench.Run(ctx, "insert", bench.Options{DatabaseURL: testdb.URL(), Service: mailer}, &r),
		"needs Options.ProducerArgs")
	require.Nil(t, r.Sweeps)
	require.Nil(t, r.DLQ)
	require.Nil(t, r.Insert)
}
