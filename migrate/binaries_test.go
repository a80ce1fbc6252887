package migrate_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/migrate"
)

// buildBinaries builds cmd/worker, cmd/scheduler, cmd/api and cmd/tierctl
// into a directory of t's and returns it.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"./cmd/worker", "./cmd/scheduler", "./cmd/api", "./cmd/tierctl")
	build.Dir = ".." // the module's root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	return dir
}

// binaryEnv is each binary's environment beside DATABASE_URL and
// DATABASE_SCHEMA, and its arguments.
var binaryEnv = map[string][]string{
	"worker":    {"WORKER_SERVICE=analyzer"},
	"scheduler": nil,
	"api":       {"API_ADDR=127.0.0.1:0", "API_TOKEN=producer-secret-token-0123", "API_ADMIN_TOKEN=admin-secret-token-4567"},
	"tierctl":   nil,
}

// started is the line each long-running binary logs once it serves.
var started = map[string]string{"worker": "worker started", "scheduler": "scheduler started", "api": "api listening"}

// command is binary name run with dbURL and schema, its output (stdout
// and stderr) captured; tierctl runs `dlq list`.
func command(t *testing.T, dir, name, dbURL, schema string) (*exec.Cmd, *proctest.Buffer) {
	t.Helper()
	var args []string
	if name == "tierctl" {
		args = []string{"dlq", "list"}
	}
	cmd := exec.Command(filepath.Join(dir, name), args...) //nolint:gosec // the binaries just built
	cmd.Env = append([]string{"DATABASE_URL=" + dbURL, "DATABASE_SCHEMA=" + schema, "LOG_LEVEL=info"}, binaryEnv[name]...)
	out := &proctest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out
}

// TestBinariesCheckSchema runs the real worker, scheduler, API and tierctl
// (`dlq list`) against an empty schema, a schema missing a River or tierq
// migration and one a newer tierq migrated: each refuses the first two with
// exit status 1 and the one line of migrate.SchemaError (found, needs, run
// `tierctl migrate`), and works on the newer one, saying so in its log.
func TestBinariesCheckSchema(t *testing.T) {
	t.Parallel()
	dir := buildBinaries(t)

	names := []string{"worker", "scheduler", "api", "tierctl"}
	refused := func(t *testing.T, db *testdb.DB, want string) {
		t.Helper()
		for _, name := range names {
			cmd, out := command(t, dir, name, db.URL, db.Schema)
			err := cmd.Run()
			var exitErr *exec.ExitError
			require.ErrorAs(t, err, &exitErr, "%s: %s", name, out.String())
			require.Equal(t, 1, exitErr.ExitCode(), "%s: %s", name, out.String())
			require.Equal(t, name+": "+want+"\n", out.String())
		}
	}
	const fix = ": run `tierctl migrate` with the same DATABASE_URL and DATABASE_SCHEMA"

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		schema := pgx.Identifier{db.Schema}.Sanitize()
		_, err := db.Pool.Exec(t.Context(), "DROP SCHEMA "+schema+" CASCADE; CREATE SCHEMA "+schema)
		require.NoError(t, err)
		refused(t, db, `database schema "`+db.Schema+`" is not migrated (no River or tierq migration recorded; this binary needs River migration 8, tierq migration 19)`+fix)
	})

	t.Run("MissingSchema", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		_, err := db.Pool.Exec(t.Context(), "DROP SCHEMA "+pgx.Identifier{db.Schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
		refused(t, db, `database schema "`+db.Schema+`" is not migrated (no River or tierq migration recorded; this binary needs River migration 8, tierq migration 19)`+fix)
	})

	t.Run("OlderTierq", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		require.NoError(t, migrate.DownTo(t.Context(), db.Pool, 8))
		refused(t, db, `database schema "`+db.Schema+`" is older than this binary (found River migration 8, tierq migration 8; needs River migration 8, tierq migration 19)`+fix)

		// What the message says to do is enough.
		migrateCmd := exec.Command(filepath.Join(dir, "tierctl"), "migrate") //nolint:gosec // built above
		migrateCmd.Env = []string{"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema}
		out, err := migrateCmd.Output()
		require.NoError(t, err)
		// (Its log, River's "No migrations to apply", comes first.)
		require.True(t, strings.HasSuffix(string(out), "\nriver migrations applied: none (up to date)\ntierq migrations applied: [9 10 11 12 13 14 15 16 17 18 19]\ntierq schema version: 19\n"), string(out))
		cmd, buf := command(t, dir, "tierctl", db.URL, db.Schema)
		require.NoError(t, cmd.Run(), buf.String())
		require.True(t, strings.HasPrefix(buf.String(), "no dead letters"), buf.String())
	})

	t.Run("OlderRiver", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		_, err := db.Pool.Exec(t.Context(), `DELETE FROM river_migration WHERE line = 'main' AND version = 8`)
		require.NoError(t, err)
		refused(t, db, `database schema "`+db.Schema+`" is older than this binary (found River migration 7, tierq migration 19; needs River migration 8, tierq migration 19)`+fix)
	})

	t.Run("Newer", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		// A newer tierq's 00020 and a newer River's migration 9.
		_, err := db.Pool.Exec(t.Context(), `
			INSERT INTO tierq_schema_version (version_id, is_applied) VALUES (20, true);
			INSERT INTO river_migration (line, version) VALUES ('main', 9)`)
		require.NoError(t, err)
		newer := `msg="database schema is newer than this binary (a newer tierq migrated it; fine during a rolling deploy)" schema=` +
			db.Schema + ` found="River migration 9, tierq migration 20" needs="River migration 8, tierq migration 19"`

		for _, name := range []string{"worker", "scheduler", "api"} {
			cmd, out := command(t, dir, name, db.URL, db.Schema)
			require.NoError(t, cmd.Start())
			proctest.WaitOutput(t, out, started[name], 30*time.Second)
			require.Contains(t, out.String(), newer, name)
			if name == "api" {
				// Ready: an old API stays in rotation on the migrated database.
				status, body := readyz(t, out.String())
				require.Equal(t, http.StatusOK, status, body)
			}
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, waitExit(t, cmd), "%s: %s", name, out.String())
		}
		cmd, out := command(t, dir, "tierctl", db.URL, db.Schema)
		require.NoError(t, cmd.Run(), out.String())
		require.True(t, strings.HasPrefix(out.String(), "no dead letters"), out.String())
	})

	// The API started with no database answering logs a warning (and
	// another for the services it could not record), listens, answers
	// /readyz 503, and stops cleanly.
	t.Run("APIWithoutDatabase", func(t *testing.T) {
		t.Parallel()
		// Port 1 on loopback: nothing listens, the connection is refused.
		cmd, out := command(t, dir, "api", "postgres://postgres@127.0.0.1:1/tierq?sslmode=disable", "")
		require.NoError(t, cmd.Start())
		proctest.WaitOutput(t, out, "api listening", 30*time.Second)
		lines := strings.Split(out.String(), "\n")
		require.Contains(t, lines[0], `level=WARN msg="database unreachable at start: serving anyway; requests that need it fail and /readyz answers 503 until it answers (schema not checked)" error="connect to database: read schema version: failed to connect to `)
		// Recording the services (service.Registry.Record) fails the same
		// way, and is logged and skipped.
		require.Contains(t, lines[1], `level=WARN msg="services not recorded" error="record services: failed to connect to `)
		require.Contains(t, lines[2], `level=INFO msg="api listening"`)
		status, body := readyz(t, lines[2])
		require.Equal(t, http.StatusServiceUnavailable, status)
		require.JSONEq(t, `{"status":"unavailable","error":"database unreachable","database":"unreachable","migrations":"unknown","leader":"unknown: database unreachable"}`, body)
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, waitExit(t, cmd), out.String())
	})

	// tierctl with no database answering: the check stays out of the way,
	// a command reports its own error as before, and watch keeps retrying.
	t.Run("TierctlWithoutDatabase", func(t *testing.T) {
		t.Parallel()
		const nowhere = "postgres://postgres@127.0.0.1:1/tierq?sslmode=disable"
		cmd, out := command(t, dir, "tierctl", nowhere, "")
		err := cmd.Run()
		var exitErr *exec.ExitError
		require.ErrorAs(t, err, &exitErr, out.String())
		require.Equal(t, 1, exitErr.ExitCode(), out.String())
		require.True(t, strings.HasPrefix(out.String(), "tierctl: list dead letters: failed to connect to `user=postgres database=tierq`"), out.String())

		watch := exec.Command(filepath.Join(dir, "tierctl"), "watch", "--interval", "100ms") //nolint:gosec // built above
		watch.Env = []string{"DATABASE_URL=" + nowhere}
		watchOut := &proctest.Buffer{}
		watch.Stdout, watch.Stderr = watchOut, watchOut
		require.NoError(t, watch.Start())
		proctest.WaitOutput(t, watchOut, "database unreachable since", 30*time.Second)
		require.NoError(t, watch.Process.Signal(syscall.SIGTERM))
		require.NoError(t, waitExit(t, watch), watchOut.String())
	})
}

// readyz GETs /readyz of the API whose "api listening" line is in log and
// returns the status and body.
func readyz(t *testing.T, log string) (int, string) {
	t.Helper()
	addr := regexp.MustCompile(`msg="api listening" addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(log)
	require.Len(t, addr, 2, log)
	resp, err := http.Get("http://" + addr[1] + "/readyz") //nolint:noctx // a test's loopback URL
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// waitExit waits for cmd to exit, killing it after a minute.
func waitExit(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return errors.New("did not exit within a minute of SIGTERM")
	}
}
