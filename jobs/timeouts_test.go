package jobs_test

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobs"
)

// TestEveryKindHasItsOwnTimeout: River reads a kind's timeout from its
// worker's Timeout method, in the worker that runs a job and in the
// leader's rescuer alike; each is a positive constant, whatever the job.
func TestEveryKindHasItsOwnTimeout(t *testing.T) {
	t.Parallel()

	var (
		analysis river.Worker[jobs.AnalysisArgs] = jobs.NewAnalysisWorker(nil, nil)
		specview river.Worker[jobs.SpecViewArgs] = jobs.NewSpecViewWorker(nil, nil)
		loadtest river.Worker[jobs.LoadTestArgs] = jobs.NewLoadTestWorker(nil)
		// The maintenance workers exist only inside the analyzer service
		// (Deps.Maintenance); their zero values answer Timeout alike.
		reanalyze river.Worker[jobs.ReanalyzeStaleArgs] = &jobs.ReanalyzeStaleWorker{}
		retention river.Worker[jobs.RetentionArgs]      = &jobs.RetentionWorker{}
	)
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{name: "analysis", got: analysis.Timeout(&river.Job[jobs.AnalysisArgs]{Args: jobs.AnalysisArgs{Target: "/srv/x"}}), want: time.Minute},
		{name: "specview", got: specview.Timeout(&river.Job[jobs.SpecViewArgs]{Args: jobs.SpecViewArgs{AnalysisResultID: 1}}), want: 30 * time.Second},
		// Not the job's sleep: the chaos suite's longest job (3.5 s) fits,
		// a job sleeping longer than a minute ends in the timeout.
		{name: "loadtest", got: loadtest.Timeout(&river.Job[jobs.LoadTestArgs]{Args: jobs.LoadTestArgs{SleepMS: 3_600_000}}), want: time.Minute},
		{name: "reanalyze_stale", got: reanalyze.Timeout(&river.Job[jobs.ReanalyzeStaleArgs]{}), want: time.Minute},
		{name: "retention", got: retention.Timeout(&river.Job[jobs.RetentionArgs]{}), want: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.got)
		})
	}
	require.Equal(t, map[string]time.Duration{
		"analysis":        time.Minute,
		"specview":        30 * time.Second,
		"loadtest":        time.Minute,
		"reanalyze_stale": time.Minute,
		"retention":       time.Minute,
	}, jobs.Timeouts())
}
