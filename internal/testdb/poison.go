package testdb

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/migrate"
)

// NotObjects are JSON values of every shape but an object, by name: what a
// producer writing river_job directly, or River's own `metadata || {...}`
// on such a value, can leave in args or metadata.
var NotObjects = map[string]string{
	"array":  `[]`,
	"string": `"tierq_base_priority"`,
	"number": `42`,
	"null":   `null`,
	"bool":   `true`,
}

// Large is a JSON object of more than 1 MiB.
func Large() string {
	return `{"filler": "` + strings.Repeat("x", 1<<20+1024) + `"}`
}

// Deep is a JSON object nested levels deep: {"a": {"a": ... {} ...}}.
func Deep(levels int) string {
	return strings.Repeat(`{"a": `, levels) + `{}` + strings.Repeat(`}`, levels)
}

// BadShapes are every value of NotObjects (in the order of their names),
// then Large() and Deep(300): the args and metadata a reader of river_job
// must cope with.
func BadShapes() []string {
	var shapes []string
	for _, name := range slices.Sorted(maps.Keys(NotObjects)) {
		shapes = append(shapes, NotObjects[name])
	}
	return append(shapes, Large(), Deep(300))
}

// RawJob is a river_job row written with SQL, as another producer (or a
// person) might write it, bypassing River's insert.
type RawJob struct {
	Kind     string
	Queue    string
	State    string // default "available"
	Priority int    // default 4
	Args     string // JSON; default {}
	Metadata string // JSON; default {}
	// Wait sets scheduled_at (and created_at) this long ago.
	Wait time.Duration
}

// InsertRaw writes job into river_job and returns its id. A discarded job
// gets attempt = max_attempts = 1, one error and finalized_at.
func InsertRaw(t testing.TB, db *DB, job RawJob) int64 {
	t.Helper()
	if job.State == "" {
		job.State = riverschema.StateAvailable
	}
	if job.Priority == 0 {
		job.Priority = 4
	}
	if job.Args == "" {
		job.Args = `{}`
	}
	if job.Metadata == "" {
		job.Metadata = `{}`
	}
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		INSERT INTO `+riverschema.JobTable+` (state, queue, priority, kind, args, metadata, max_attempts, attempt,
		                       created_at, scheduled_at, attempted_at, finalized_at, errors)
		SELECT $1::`+riverschema.StateType+`, $2, $3, $4, $5::jsonb, $6::jsonb, 1,
		       CASE WHEN $1 = '`+riverschema.StateDiscarded+`' THEN 1 ELSE 0 END,
		       now() - make_interval(secs => $7), now() - make_interval(secs => $7),
		       CASE WHEN $1 = '`+riverschema.StateDiscarded+`' THEN now() END,
		       CASE WHEN $1 = '`+riverschema.StateDiscarded+`' THEN now() END,
		       CASE WHEN $1 = '`+riverschema.StateDiscarded+`'
		            THEN ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'written by hand', 'trace', '')]
		       END
		RETURNING id`,
		job.State, job.Queue, job.Priority, job.Kind, job.Args, job.Metadata, job.Wait.Seconds()).Scan(&id))
	return id
}

// AllowInfinite drops migration 00010's check constraint
// (migrate.FiniteTimestampsCheck) from the test's schema, as on a database
// whose operator dropped it: tests of the readers that still cope with an
// infinite timestamp (the sweeps, the API's listings, the autoscaler's
// queries) call it before writing one.
func AllowInfinite(t testing.TB, db *DB) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(),
		`ALTER TABLE `+riverschema.JobTable+` DROP CONSTRAINT IF EXISTS `+migrate.FiniteTimestampsCheck)
	require.NoError(t, err)
}

// BeforeFiniteTimestamps puts the test's schema back to tierq's version
// before migration 00010: its check dropped (AllowInfinite), the later
// migrations undone (00011's tierq_services, 00012's limit tables and
// 00013's cap trigger, its function and its index, 00014's job_wait_stats
// dropped, 00015's rate trigger, its function and tenant_rate_buckets
// dropped, 00016's tier and tenant columns of dead_letter_jobs dropped,
// 00017's turn trigger, its functions, indexes and slots column dropped,
// 00018's index dropped; 00019 rewrote only 00017's functions),
// and their versions forgotten, so that the next migrate.Up
// applies 00010 and every later one again, as to a database upgraded from
// that version. (goose refuses to apply a migration below the latest
// recorded: a migration added after 00019 must be undone here too.)
func BeforeFiniteTimestamps(t testing.TB, db *DB) {
	t.Helper()
	AllowInfinite(t, db)
	_, err := db.Pool.Exec(context.Background(),
		`DROP TRIGGER IF EXISTS tierq_tenant_cap ON `+riverschema.JobTable+`; DROP FUNCTION IF EXISTS tierq_tenant_cap();
		 DROP TRIGGER IF EXISTS tierq_tenant_rate ON `+riverschema.JobTable+`; DROP FUNCTION IF EXISTS tierq_tenant_rate();
		 DROP INDEX IF EXISTS river_job_tierq_capped_idx;
		 DROP TRIGGER IF EXISTS tierq_tenant_turn ON `+riverschema.JobTable+`; DROP FUNCTION IF EXISTS tierq_tenant_turn();
		 DROP FUNCTION IF EXISTS tierq_turn_tag(text, smallint, text, timestamptz); DROP FUNCTION IF EXISTS tierq_due_micros(timestamptz, timestamptz, text[], jsonb);
		 DROP INDEX IF EXISTS river_job_tierq_turn_idx, river_job_tierq_turn_last_idx, river_job_tierq_turn_due_idx;
		 ALTER TABLE fair_share_slots DROP COLUMN IF EXISTS turns;
		 ALTER TABLE dead_letter_jobs DROP COLUMN IF EXISTS tenant, DROP COLUMN IF EXISTS tier;
		 DROP TABLE IF EXISTS tierq_services, tier_limits, tenant_limits, tenant_quota_usage, job_wait_stats, tenant_rate_buckets; DELETE FROM tierq_schema_version WHERE version_id >= 10`)
	require.NoError(t, err)
}
