package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
)

func TestMain(m *testing.M) {
	proctest.RunMain(tierctlMain)
	os.Exit(m.Run())
}

// tierctlMain is cmd/tierctl's main, for the processes tests start
// (proctest.Command).
func tierctlMain() {
	if err := Main(context.Background(), os.Args, os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tierctl:", err)
		os.Exit(ExitCode(err))
	}
}

func TestDeadLetterCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	environ := append(dbEnv(t, db), "USER=alice")
	testdb.SeedDiscarded(t, db, 12) // two per service queue

	out, err := runTierctl(t, environ, "dlq", "drain", "--batch", "5")
	require.NoError(t, err, out)
	require.Contains(t, out, "moved 12 discarded jobs into dead_letter_jobs in 3 statements")
	require.Contains(t, out, "analysis_default     2")

	out, err = runTierctl(t, environ, "dlq", "list")
	require.NoError(t, err, out)
	require.Regexp(t, `ID\s+JOB ID\s+KIND\s+QUEUE\s+TIER\s+TENANT\s+ATTEMPTS\s+LAST ERROR\s+MOVED AT\s+REPLAYED AS`, out)
	require.Regexp(t, `analysis\s+analysis_default\s+\S+\s+\S+\s+2/2\s+attempt 2 of job \d+`, out)

	out, err = runTierctl(t, environ, "dlq", "list", "--queue", "specview_default", "--json")
	require.NoError(t, err, out)
	var rows []dlq.DeadLetter
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "specview", rows[0].Kind)
	require.Len(t, rows[0].Errors, 2)

	out, err = runTierctl(t, environ, "dlq", "list", "--limit", "5")
	require.NoError(t, err, out)
	require.Contains(t, out, "(first 5; next page: --before")

	target := rows[0]
	out, err = runTierctl(t, environ, "dlq", "show", itoa(target.ID))
	require.NoError(t, err, out)
	require.Contains(t, out, "kind specview")
	require.Contains(t, out, `"analysis_result_id":`)
	require.Contains(t, out, "attempts      2 of 2")
	require.Regexp(t, `attempt 1 at \S+: attempt 1 of job \d+`, out)
	require.Regexp(t, `attempt 2 at \S+: attempt 2 of job \d+`, out)
	require.Contains(t, out, "replayed      no")

	out, err = runTierctl(t, environ, "dlq", "replay", itoa(target.ID), "--to-queue", "specview_priority")
	require.NoError(t, err, out)
	require.Regexp(t, `dead letter \d+: replayed as job \d+ in specview_priority`, out)
	// --to-queue is a queue of a service recorded in the database.
	_, err = runTierctl(t, environ, "dlq", "replay", "--all", "--to-queue", "analyss_priority")
	require.Equal(t, 2, ExitCode(err))
	require.ErrorContains(t, err, `queue "analyss_priority" is not a service queue (analysis_priority, analysis_default, analysis_scheduled, specview_priority, specview_default, specview_scheduled)`)
	out, err = runTierctl(t, environ, "dlq", "show", itoa(target.ID))
	require.NoError(t, err, out)
	require.Regexp(t, `replayed      \S+ as job \d+ by alice`, out)

	// Again: refused, exit 1, nothing inserted; --force replays.
	out, err = runTierctl(t, environ, "dlq", "replay", itoa(target.ID), "999999")
	require.ErrorContains(t, err, "2 of 2 dead letters not replayed")
	require.Contains(t, out, "already replayed")
	require.Contains(t, out, "dead letter not found")
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job`))
	out, err = runTierctl(t, environ, "dlq", "replay", itoa(target.ID), "--force", "--actor", "bob")
	require.NoError(t, err, out)
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job`))

	// Bulk, filtered: the two analysis_default rows.
	out, err = runTierctl(t, environ, "dlq", "replay", "--all", "--queue", "analysis_default", "--kind", "analysis", "--batch", "1")
	require.NoError(t, err, out)
	require.Contains(t, out, "2/2")
	require.Contains(t, out, "replayed 2 dead letters")
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'analysis_default'`))

	out, err = runTierctl(t, environ, "dlq", "list", "--pending", "--json")
	require.NoError(t, err, out)
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 9)

	// --json prints one JSON document and nothing else (no progress bar).
	out, err = runTierctl(t, environ, "dlq", "replay", "--all", "--kind", "specview", "--queue", "specview_scheduled", "--json")
	require.NoError(t, err, out)
	var bulk dlq.ReplayAllResult
	require.NoError(t, json.Unmarshal([]byte(out), &bulk), out)
	require.Equal(t, 2, bulk.Replayed)

	// Dismiss one for good; a missing id exits 1 after the others are done.
	pending := int64(db.Count(t, `SELECT min(id) FROM dead_letter_jobs WHERE replayed_at IS NULL`))
	out, err = runTierctl(t, environ, "dlq", "delete", itoa(pending), "999999")
	require.ErrorContains(t, err, "1 of 2 dead letters not found")
	require.Contains(t, out, "deleted")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE id = $1`, pending))

	out, err = runTierctl(t, environ, "dlq", "purge", "--older-than", "0s", "--replayed-only", "--batch", "2")
	require.NoError(t, err, out)
	require.Contains(t, out, "purged 5 replayed dead letters")
	out, err = runTierctl(t, environ, "dlq", "purge", "--older-than", "30d")
	require.NoError(t, err, out)
	require.Contains(t, out, "purged 0 dead letters")
	require.Equal(t, 6, db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// TestDrainKilledMidRunLosesNothing kills `tierctl dlq drain` (SIGKILL)
// while it moves 20,000 discarded jobs in batches of 20, then checks that
// every job is in exactly one place and that a second drain moves the rest.
func TestDrainKilledMidRunLosesNothing(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	const n = 20_000
	testdb.SeedDiscarded(t, db, n)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE discarded_before AS SELECT id FROM river_job`)
	require.NoError(t, err)

	// The child's connections carry an application name, to wait for them.
	appName := "tierctl_drain_" + db.Schema
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", appName)
	u.RawQuery = q.Encode()

	cmd, out := proctest.Command(t, "DATABASE_URL="+u.String(), "DATABASE_SCHEMA="+db.Schema)
	cmd.Args = append(cmd.Args, "dlq", "drain", "--batch", "20")
	require.NoError(t, cmd.Start())
	testdb.WaitFor(t, 30*time.Second, "the drain to have moved some jobs", func() bool {
		return db.Count(t, `SELECT count(*) FROM dead_letter_jobs`) > 0
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	testdb.WaitFor(t, 30*time.Second, "the killed drain's backend to finish", func() bool {
		return db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName) == 0
	})

	moved := db.Count(t, `SELECT count(*) FROM dead_letter_jobs`)
	left := db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'discarded'`)
	t.Logf("killed after moving %d of %d; output: %q", moved, n, out.String())
	require.Positive(t, left, "killed mid-run (else this test proves nothing)")
	require.Equal(t, n, moved+left)
	require.Zero(t, db.Count(t, `
		SELECT count(*) FROM discarded_before AS b
		WHERE (SELECT count(*) FROM river_job WHERE id = b.id) + (SELECT count(*) FROM dead_letter_jobs WHERE job_id = b.id) <> 1`))

	res, err := runTierctl(t, dbEnv(t, db), "dlq", "drain")
	require.NoError(t, err, res)
	require.Equal(t, n, db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM river_job`))
}

// TestDeadLetterTierAndTenantFlags: dlq list --tier and --tenant list the
// dead letters of that tier and tenant, newest first; dlq replay --all
// with them replays exactly those; a tier tierq does not know is a usage
// error (exit 2), and the filters go with --all only.
func TestDeadLetterTierAndTenantFlags(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	environ := append(dbEnv(t, db), "USER=alice")
	for _, j := range []struct{ kind, metadata string }{
		{"pro_acme", `{"tierq:tier": "pro", "tierq:tenant": "acme"}`},
		{"free_acme", `{"tierq:tier": "free", "tierq:tenant": "acme"}`},
		{"pro_beta", `{"tierq:tier": "pro", "tierq:tenant": "beta"}`},
	} {
		testdb.InsertRaw(t, db, testdb.RawJob{State: "discarded", Queue: "analysis_default", Kind: j.kind, Metadata: j.metadata})
	}
	out, err := runTierctl(t, environ, "dlq", "drain")
	require.NoError(t, err, out)

	kinds := func(args ...string) []string {
		t.Helper()
		out, err := runTierctl(t, environ, append([]string{"dlq", "list", "--json"}, args...)...)
		require.NoError(t, err, out)
		var rows []dlq.DeadLetter
		require.NoError(t, json.Unmarshal([]byte(out), &rows))
		kinds := []string{}
		for _, d := range rows {
			kinds = append(kinds, d.Kind)
		}
		return kinds
	}
	require.Equal(t, []string{"pro_beta", "pro_acme"}, kinds("--tier", "pro"))
	require.Equal(t, []string{"free_acme", "pro_acme"}, kinds("--tenant", "acme"))
	require.Equal(t, []string{"pro_acme"}, kinds("--tier", "pro", "--tenant", "acme"))
	require.Equal(t, []string{}, kinds("--tier", "unknown"))

	// --json prints each dead letter's tier and tenant under those names.
	out, err = runTierctl(t, environ, "dlq", "list", "--tier", "free", "--json")
	require.NoError(t, err, out)
	var raw []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	require.Len(t, raw, 1)
	require.Equal(t, "free_acme", raw[0]["kind"])
	require.Equal(t, "free", raw[0]["tier"])
	require.Equal(t, "acme", raw[0]["tenant"])
	out, err = runTierctl(t, environ, "dlq", "list", "--tenant", "beta")
	require.NoError(t, err, out)
	require.Regexp(t, `pro_beta\s+analysis_default\s+pro\s+beta\s`, out)

	out, err = runTierctl(t, environ, "dlq", "list", "--tier", "gold")
	require.Equal(t, 2, ExitCode(err), out)
	require.EqualError(t, err, "invalid dead-letter request: the tier is one of free, pro, pro_plus, enterprise or unknown")
	out, err = runTierctl(t, environ, "dlq", "replay", "1", "--tenant", "acme")
	require.Equal(t, 2, ExitCode(err), out)
	require.EqualError(t, err, "--queue, --kind, --tier and --tenant select rows for --all; with IDs, leave them out")

	out, err = runTierctl(t, environ, "dlq", "replay", "--all", "--tenant", "acme", "--tier", "free")
	require.NoError(t, err, out)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job`))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'free_acme'`))
	require.Equal(t, []string{"pro_acme"}, kinds("--tenant", "acme", "--pending"))
}
