package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/ctl"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/internal/workertest"
)

// TestDemoRunsToCompletion runs tierctl demo at a reduced size against real
// worker River clients of both services (LOAD_TEST_WORKLOAD=true, default
// worker counts): every job it inserts ends completed, paid jobs in the
// priority queues, free ones in the default queues, background ones in the
// scheduled queues.
func TestDemoRunsToCompletion(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, name := range testdb.Registry(t).Names() {
		db.Start(t, workertest.RiverConfig(t, db, "WORKER_SERVICE="+name, "LOAD_TEST_WORKLOAD=true"))
	}

	// 60 free jobs over 1s, a paid job every 200ms for 3s (15), 2 background.
	out, err := runTierctl(t, dbEnv(t, db), "demo", "--free", "60", "--burst", "1s", "--duration", "3s",
		"--paid-every", "200ms", "--background", "2", "--sleep-ms", "20", "--report-every", "1s", "--timeout", "1m")
	require.NoError(t, err, out)
	t.Log(out)
	require.Contains(t, out, "demo: load-test jobs (kind loadtest) that sleep 10-30 ms")
	require.Contains(t, out, "free backlog")
	require.Contains(t, out, "the claim: paid p99 wait")

	require.Equal(t, 60+15+2, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'loadtest'`))
	require.Equal(t, 60+15+2, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'loadtest' AND state = 'completed'`))
	require.Equal(t, 36, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'analysis_default'`))
	require.Equal(t, 24, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'specview_default'`))
	require.Equal(t, 15, db.Count(t, `SELECT count(*) FROM river_job WHERE queue IN ('analysis_priority', 'specview_priority')`))
	require.Equal(t, 8, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'analysis_priority'`))
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job WHERE queue IN ('analysis_scheduled', 'specview_scheduled')`))
	// Paid tiers cycle pro, pro_plus, enterprise: priorities 4, 3, 2.
	require.Equal(t, 5, db.Count(t, `SELECT count(*) FROM river_job WHERE queue LIKE '%\_priority' AND priority = 2`))
	// Each job says its tier (read by the metrics, the API and tierctl watch).
	require.Equal(t, 5, db.Count(t, `SELECT count(*) FROM river_job WHERE queue LIKE '%\_priority' AND args->>'tier' = 'enterprise'`))
	require.Equal(t, 60, db.Count(t, `SELECT count(*) FROM river_job WHERE queue LIKE '%\_default' AND args->>'tier' = 'free'`))
}

// TestDemoUsageErrors: bad sizes exit 2 before anything is inserted.
func TestDemoUsageErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	tests := []struct {
		name string
		give []string
		want string
	}{
		{name: "negative free", give: []string{"--free", "-1"}, want: "--free must be between 0 and 1000000, not -1"},
		{name: "burst longer than duration", give: []string{"--burst", "2m", "--duration", "1m"}, want: "--burst must be between 0 and --duration (1m0s), not 2m0s"},
		{name: "sleep zero", give: []string{"--sleep-ms", "0"}, want: "--sleep-ms must be between 1 and 60000, not 0"},
		{name: "bad flag", give: []string{"--paid-every", "soon"}, want: `invalid argument "soon"`},
		{name: "positional argument", give: []string{"now"}, want: `unknown command "now" for "tierctl demo"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runTierctl(t, dbEnv(t, db), append([]string{"demo"}, tt.give...)...)
			var usage *ctl.UsageError
			require.True(t, errors.As(err, &usage), "%v", err)
			require.ErrorContains(t, err, tt.want)
		})
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job`), "nothing inserted")
}

// TestDemoInterrupted: Ctrl-C (the context ends) stops the demo without an
// error, saying how many jobs it inserted; they stay queued.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"tierctl", "demo", "--free", "50", "--burst", "0", "--duration", "1m", "--paid-every", "50ms", "--background", "0", "--report-every", "1h"}, dbEnv(t, db), &out)
	}()
	testdb.WaitFor(t, 10*time.Second, "the demo inserted its flood", func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'loadtest'`) >= 51
	})
	cancel()
	require.NoError(t, <-done)
	n := db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'loadtest'`)
	require.Regexp(t, fmt.Sprintf(`demo interrupted after \d+s: %d jobs inserted stay queued\n`, n), out.String())
}
