package runscript

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRunStopsCleanly drives scripts/run.sh as a terminal does, mid-demo:
// Ctrl-C (SIGINT to its process group), the terminal closed (SIGHUP), and a
// second Ctrl-C while it stops. Each time the workers, the scheduler and the
// API get one SIGTERM, the jobs running at the signal finish (SOFT_STOP_TIMEOUT
// is longer than their sleeps) and none is left running, every process the
// script started is gone when it exits, and the API's port is free.
func TestRunStopsCleanly(t *testing.T) {
	b := setup(t)

	// A short demo of jobs that sleep 1-3 s (2-6 s with a second Ctrl-C):
	// signalled once some run, it never reaches its end.
	run := func(t *testing.T, sleepMS string) (*script, []int64, []proc) {
		t.Helper()
		s := b.start(t,
			"DEMO_SLEEP_MS="+sleepMS,
			"DEMO_FLAGS=--free 60 --burst 0s --duration 60s --paid-every 500ms --background 2 --report-every 1s",
			"DEMO_JOBS=4",
			"SOFT_STOP_TIMEOUT=20s",
		)
		s.waitFor(3*time.Minute, "three load-test jobs running", func() bool {
			return s.counted(3, `SELECT count(*) FROM river_job WHERE kind = 'loadtest' AND state = 'running'`)
		})
		// The workers may run jobs before the scheduler has started (it
		// records the services and applies the reference app's migration
		// line first): the signal is for a running scheduler, as a user's
		// Ctrl-C mid-demo is (one signalled while it starts stops cleanly
		// too: process TestRunStoppedWhileStarting).
		s.waitFor(time.Minute, "the scheduler started", func() bool {
			raw, err := os.ReadFile(filepath.Join(s.logs, "scheduler.log"))
			return err == nil && strings.Contains(string(raw), `msg="scheduler started"`)
		})
		procs := s.descendants()
		var running []int64
		rows, err := s.pool.Query(t.Context(), `SELECT id FROM river_job WHERE state = 'running' ORDER BY id`)
		require.NoError(t, err)
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			running = append(running, id)
		}
		require.NoError(t, rows.Err())
		require.Len(t, s.startedPIDs(), 4, "workers, scheduler and API started; output:\n%s", s.out)
		return s, running, procs
	}

	// check is what a clean stop leaves.
	check := func(t *testing.T, s *script, running []int64, procs []proc) {
		t.Helper()
		s.requireGone(procs)
		s.requirePortFree()
		require.Equal(t, 0, s.count(`SELECT count(*) FROM river_job WHERE state = 'running'`), "jobs left running")
		require.Equal(t, len(running), s.count(`SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'completed'`, running),
			"the jobs running at the signal finished (ids %v)", running)
		require.Equal(t, []string{"stopped: worker analyzer exit 0, worker specgen exit 0, scheduler exit 0, api exit 0. Logs: " + s.logs + "/"},
			s.lines("stopped:"))
		require.Equal(t, []string{"jobs left running: 0"}, s.lines("jobs left running:"))
		// One signal each: a worker logs stopping once and stops; with a
		// second signal it would die without "worker stopped".
		for _, log := range []string{"worker-analyzer.log", "worker-specgen.log", "scheduler.log", "api.log"} {
			raw, err := os.ReadFile(filepath.Join(s.logs, log))
			require.NoError(t, err)
			text := string(raw)
			switch log {
			case "api.log":
				require.Contains(t, text, "api stopped", log)
			case "scheduler.log":
				require.Equal(t, 1, strings.Count(text, "scheduler stopping"), "%s:\n%s", log, text)
				require.Contains(t, text, "scheduler stopped", log)
			default:
				require.Equal(t, 1, strings.Count(text, "worker stopping"), "%s:\n%s", log, text)
				require.Contains(t, text, "worker stopped", log)
			}
		}
	}

	t.Run("CtrlCMidDemo", func(t *testing.T) {
		s, running, procs := run(t, "2000")
		s.signal(syscall.SIGINT)
		s.wait(60 * time.Second)
		require.Contains(t, s.out.String(), "demo interrupted after")
		check(t, s, running, procs)
	})

	t.Run("TerminalClosed", func(t *testing.T) {
		s, running, procs := run(t, "2000")
		s.signal(syscall.SIGHUP)
		s.wait(60 * time.Second)
		check(t, s, running, procs)
	})

	t.Run("SecondCtrlCWhileStopping", func(t *testing.T) {
		s, running, procs := run(t, "4000")
		s.signal(syscall.SIGINT)
		s.waitOutput("stopping: one SIGTERM each", 10*time.Second)
		// The scheduler and the API stop at once, the workers only once
		// their jobs (2-6 s) finish: the second Ctrl-C comes once the first
		// two are gone (the script has reaped them, so their pids are free
		// for reuse), and its kill hint must leave them out.
		exited := []int{s.startedPIDOf("scheduler"), s.startedPIDOf("api")}
		s.waitFor(20*time.Second, "the scheduler and the API gone", func() bool {
			return gone(procs, exited...)
		})
		s.signal(syscall.SIGINT)
		s.waitOutput("still stopping, no second signal sent: waiting for worker", 10*time.Second)
		s.wait(60 * time.Second)
		check(t, s, running, procs)

		// The hint kills exactly the processes the line says are still
		// running: workers, never an exited process's pid.
		still := s.lines("still stopping")
		require.Len(t, still, 1, "output:\n%s", s.out)
		m := stillStopping.FindStringSubmatch(still[0])
		require.NotNil(t, m, "still stopping line: %s", still[0])
		var named []int
		for _, n := range namedPID.FindAllStringSubmatch(m[1], -1) {
			pid, _ := strconv.Atoi(n[1])
			named = append(named, pid)
		}
		var hinted []int
		for _, f := range strings.Fields(m[2]) {
			pid, err := strconv.Atoi(f)
			require.NoError(t, err, "kill hint: %s", still[0])
			hinted = append(hinted, pid)
		}
		require.NotEmpty(t, named, still[0])
		require.Equal(t, named, hinted, "the kill hint names the running processes only: %s", still[0])
		workers := []int{s.startedPIDOf("worker analyzer"), s.startedPIDOf("worker specgen")}
		for _, pid := range hinted {
			require.NotContains(t, exited, pid, "the kill hint names an exited process: %s", still[0])
			require.Contains(t, workers, pid, "the kill hint names a process that is no worker: %s", still[0])
		}
	})
}

// stillStopping is the line a second Ctrl-C prints: what is still running
// (names and pids) and the pids of the kill hint.
var (
	stillStopping = regexp.MustCompile(`^still stopping, no second signal sent: waiting for (.*) to finish running jobs .*; to kill them at once: kill -KILL ([0-9 ]+)$`)
	namedPID      = regexp.MustCompile(`\(pid (\d+)\)`)
)

// gone reports whether each of pids has exited and been reaped (no longer
// in /proc, or its pid now another process's): a process of procs, the
// snapshot that tells them apart.
func gone(procs []proc, pids ...int) bool {
	for _, pid := range pids {
		now, ok := readProc(pid)
		if !ok {
			continue
		}
		for _, p := range procs {
			if p.pid == pid && p.start == now.start {
				return false
			}
		}
	}
	return true
}
