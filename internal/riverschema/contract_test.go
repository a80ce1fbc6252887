package riverschema_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/internal/testdb"
)

type contractArgs struct {
	N int `json:"n"`
}

func (contractArgs) Kind() string { return "riverschema_contract" }

type contractWorker struct {
	river.WorkerDefaults[contractArgs]
}

func (*contractWorker) Work(context.Context, *river.Job[contractArgs]) error { return nil }

var _ river.Worker[contractArgs] = (*contractWorker)(nil)

// TestContract checks every name and message riverschema states against
// River as go.mod pins it: a schema migrated by River's own migrations
// alone (no tierq migration, so nothing tierq adds can stand in for a
// River object), and real River clients sending their notifications.
func TestContract(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		pool   *pgxpool.Pool
		schema string
		// listen LISTENs to channel on a connection of its own, with the
		// pool's search_path, closed when the test ends.
		listen func(t *testing.T, channel string) *pgx.Conn
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		ctx := context.Background()

		// NewCore makes sure the test database exists; the schema checked
		// here is a fresh one beside it, migrated by rivermigrate only.
		core := testdb.NewCore(t)
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		schema := "riverschema_" + hex.EncodeToString(b)
		_, err := core.Pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
		require.NoError(t, err)
		t.Cleanup(func() {
			conn, err := pgx.Connect(context.Background(), core.URL)
			if err != nil {
				t.Logf("drop schema %s: %v", schema, err)
				return
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
				t.Logf("drop schema %s: %v", schema, err)
			}
		})

		config, err := pgxpool.ParseConfig(core.URL)
		require.NoError(t, err)
		config.ConnConfig.RuntimeParams["search_path"] = schema
		pool := testdb.PoolFor(t, config)

		migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
		require.NoError(t, err)
		_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		require.NoError(t, err)

		return &testBundle{
			pool:   pool,
			schema: schema,
			listen: func(t *testing.T, channel string) *pgx.Conn {
				t.Helper()
				conn, err := pgx.ConnectConfig(ctx, config.ConnConfig.Copy())
				require.NoError(t, err)
				t.Cleanup(func() { _ = conn.Close(context.Background()) })
				_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
				require.NoError(t, err)
				return conn
			},
		}
	}

	// wait returns the next notification on conn, failing after 10 s.
	wait := func(t *testing.T, conn *pgx.Conn) (channel, payload string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(ctx)
		require.NoError(t, err, "no notification within 10 s")
		return n.Channel, n.Payload
	}

	// decodeStrict decodes payload into v, refusing fields v does not name.
	decodeStrict := func(t *testing.T, payload string, v any) {
		t.Helper()
		dec := json.NewDecoder(bytes.NewReader([]byte(payload)))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(v), "payload %s", payload)
	}

	t.Run("Tables", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, table := range []string{
			riverschema.JobTable, riverschema.QueueTable, riverschema.LeaderTable, riverschema.MigrationTable,
		} {
			var n int
			require.NoError(t, bundle.pool.QueryRow(context.Background(),
				`SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2`,
				bundle.schema, table).Scan(&n))
			require.Equal(t, 1, n, "table %s", table)
		}
	})

	t.Run("Columns", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		tests := []struct {
			table, column, want string
		}{
			{riverschema.JobTable, riverschema.JobID, "bigint"},
			{riverschema.JobTable, riverschema.JobArgs, "jsonb"},
			{riverschema.JobTable, riverschema.JobAttempt, "smallint"},
			{riverschema.JobTable, riverschema.JobAttemptedAt, "timestamp with time zone"},
			{riverschema.JobTable, riverschema.JobAttemptedBy, "text[]"},
			{riverschema.JobTable, riverschema.JobCreatedAt, "timestamp with time zone"},
			{riverschema.JobTable, riverschema.JobErrors, "jsonb[]"},
			{riverschema.JobTable, riverschema.JobFinalizedAt, "timestamp with time zone"},
			{riverschema.JobTable, riverschema.JobKind, "text"},
			{riverschema.JobTable, riverschema.JobMaxAttempts, "smallint"},
			{riverschema.JobTable, riverschema.JobMetadata, "jsonb"},
			{riverschema.JobTable, riverschema.JobPriority, "smallint"},
			{riverschema.JobTable, riverschema.JobQueue, "text"},
			{riverschema.JobTable, riverschema.JobScheduledAt, "timestamp with time zone"},
			{riverschema.JobTable, riverschema.JobState, riverschema.StateType},
			{riverschema.JobTable, riverschema.JobTags, "character varying(255)[]"},
			{riverschema.JobTable, riverschema.JobUniqueKey, "bytea"},
			{riverschema.JobTable, riverschema.JobUniqueStates, "bit(8)"},
			{riverschema.QueueTable, riverschema.QueueName, "text"},
			{riverschema.QueueTable, riverschema.QueuePausedAt, "timestamp with time zone"},
			{riverschema.LeaderTable, riverschema.LeaderID, "text"},
			{riverschema.LeaderTable, riverschema.LeaderElectedAt, "timestamp with time zone"},
			{riverschema.LeaderTable, riverschema.LeaderExpiresAt, "timestamp with time zone"},
			{riverschema.MigrationTable, riverschema.MigrationLine, "text"},
			{riverschema.MigrationTable, riverschema.MigrationVer, "bigint"},
		}
		for _, tt := range tests {
			var got string
			err := bundle.pool.QueryRow(context.Background(), `
SELECT format_type(a.atttypid, a.atttypmod)
FROM pg_catalog.pg_attribute AS a
JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped`,
				bundle.schema, tt.table, tt.column).Scan(&got)
			require.NoError(t, err, "column %s.%s", tt.table, tt.column)
			require.Equal(t, tt.want, got, "type of %s.%s", tt.table, tt.column)
		}
	})

	t.Run("States", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		rows, err := bundle.pool.Query(context.Background(), `
SELECT e.enumlabel
FROM pg_catalog.pg_enum AS e
JOIN pg_catalog.pg_type AS t ON t.oid = e.enumtypid
JOIN pg_catalog.pg_namespace AS n ON n.oid = t.typnamespace
WHERE n.nspname = $1 AND t.typname = $2`, bundle.schema, riverschema.StateType)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.ElementsMatch(t, []string{
			riverschema.StateAvailable, riverschema.StateCancelled, riverschema.StateCompleted,
			riverschema.StateDiscarded, riverschema.StatePending, riverschema.StateRetryable,
			riverschema.StateRunning, riverschema.StateScheduled,
		}, got)
	})

	t.Run("Indexes", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		tests := []struct {
			name, want string
		}{
			{riverschema.PrioritizedFetchingIndex, "(state, queue, priority, scheduled_at, id)"},
			{riverschema.StateAndFinalizedAtIndex, "(state, finalized_at) WHERE (finalized_at IS NOT NULL)"},
			{riverschema.UniqueIndex, "(unique_key) WHERE ((unique_key IS NOT NULL) AND (unique_states IS NOT NULL) AND river_job_state_in_bitmask(unique_states, state))"},
		}
		for _, tt := range tests {
			var def string
			err := bundle.pool.QueryRow(context.Background(),
				`SELECT indexdef FROM pg_catalog.pg_indexes WHERE schemaname = $1 AND tablename = $2 AND indexname = $3`,
				bundle.schema, riverschema.JobTable, tt.name).Scan(&def)
			require.NoError(t, err, "index %s", tt.name)
			require.Contains(t, def, tt.want, "index %s", tt.name)
		}
	})

	t.Run("MainLine", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// rivermigrate's own migrations are recorded under MainLine, up to
		// its latest version: what migrate.Read compares with.
		migrator, err := rivermigrate.New(riverpgxv5.New(bundle.pool), nil)
		require.NoError(t, err)
		var want int
		for _, m := range migrator.AllVersions() {
			want = max(want, m.Version)
		}
		var got int
		require.NoError(t, bundle.pool.QueryRow(context.Background(),
			`SELECT coalesce(max(version), 0) FROM river_migration WHERE line = $1`, riverschema.MainLine).Scan(&got))
		require.Equal(t, want, got)
	})

	t.Run("StateInBitmaskFunc", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		var args, result string
		err := bundle.pool.QueryRow(context.Background(), `
SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = $2`, bundle.schema, riverschema.StateInBitmaskFunc).Scan(&args, &result)
		require.NoError(t, err)
		require.Equal(t, "bitmask bit, state "+riverschema.StateType, args)
		require.Equal(t, "boolean", result)
	})

	t.Run("UniqueHeld", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := context.Background()
		client, err := river.NewClient(riverpgxv5.New(bundle.pool), &river.Config{Schema: bundle.schema})
		require.NoError(t, err)
		res, err := client.Insert(ctx, contractArgs{N: 1}, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
		require.NoError(t, err)

		held := func() int {
			var n int
			require.NoError(t, bundle.pool.QueryRow(ctx,
				`SELECT count(*) FROM river_job AS j WHERE j.id = $1
				 AND j.unique_states IS NOT NULL AND `+riverschema.StateInBitmaskFunc+`(j.unique_states, j.state)`,
				res.Job.ID).Scan(&n))
			return n
		}
		require.Equal(t, 1, held(), "an available unique job holds its key")
		_, err = bundle.pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, 0, held(), "a discarded one does not (River's default unique states)")
	})

	t.Run("InsertNotification", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := context.Background()
		channel := riverschema.Channel(bundle.schema, riverschema.InsertTopic)
		conn := bundle.listen(t, channel)

		client, err := river.NewClient(riverpgxv5.New(bundle.pool), &river.Config{Schema: bundle.schema})
		require.NoError(t, err)
		_, err = client.Insert(ctx, contractArgs{N: 1}, &river.InsertOpts{Queue: "contract_q"})
		require.NoError(t, err)

		gotChannel, payload := wait(t, conn)
		require.Equal(t, channel, gotChannel)
		require.Equal(t, riverschema.InsertPayload("contract_q"), payload, "River's payload, byte for byte")
		require.Equal(t, `{"queue": "contract_q"}`, payload)
		var n riverschema.InsertNotification
		decodeStrict(t, payload, &n)
		require.Equal(t, riverschema.InsertNotification{Queue: "contract_q"}, n)

		// tierq's SQL form goes to the same channel with the same JSON.
		_, err = bundle.pool.Exec(ctx, `SELECT `+riverschema.NotifyInsertSQL("$1::text"), "contract_q")
		require.NoError(t, err)
		gotChannel, payload = wait(t, conn)
		require.Equal(t, channel, gotChannel)
		n = riverschema.InsertNotification{}
		decodeStrict(t, payload, &n)
		require.Equal(t, riverschema.InsertNotification{Queue: "contract_q"}, n)
	})

	t.Run("ResignedNotification", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := context.Background()
		channel := riverschema.Channel(bundle.schema, riverschema.LeadershipTopic)

		workers := river.NewWorkers()
		river.AddWorker(workers, &contractWorker{})
		const clientID = "riverschema_contract_leader"
		client, err := river.NewClient(riverpgxv5.New(bundle.pool), &river.Config{
			ID:      clientID,
			Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
			Schema:  bundle.schema,
			Workers: workers,
		})
		require.NoError(t, err)
		require.NoError(t, client.Start(ctx))
		t.Cleanup(func() { _ = client.Stop(context.Background()) })

		// River's leadership row, by the names tierq's leader watch reads.
		testdb.WaitFor(t, 10*time.Second, "the client to lead", func() bool {
			var n int
			require.NoError(t, bundle.pool.QueryRow(ctx,
				`SELECT count(*) FROM river_leader WHERE leader_id = $1 AND elected_at <= now() AND expires_at > now()`,
				clientID).Scan(&n))
			return n == 1
		})

		conn := bundle.listen(t, channel)
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stopCtx))

		gotChannel, payload := wait(t, conn)
		require.Equal(t, channel, gotChannel)
		var n riverschema.LeadershipNotification
		decodeStrict(t, payload, &n)
		require.Equal(t, riverschema.LeadershipNotification{Action: riverschema.ActionResigned, LeaderID: clientID}, n)

		// tierq's SQL form, over a river_leader row: the same channel, the
		// same message.
		_, err = bundle.pool.Exec(ctx,
			`INSERT INTO river_leader (leader_id, elected_at, expires_at) VALUES ($1, now(), now() + interval '15 seconds')`, clientID)
		require.NoError(t, err)
		_, err = bundle.pool.Exec(ctx, `SELECT `+riverschema.NotifyResignedSQL+` FROM river_leader`)
		require.NoError(t, err)
		gotChannel, payload = wait(t, conn)
		require.Equal(t, channel, gotChannel)
		n = riverschema.LeadershipNotification{}
		decodeStrict(t, payload, &n)
		require.Equal(t, riverschema.LeadershipNotification{Action: riverschema.ActionResigned, LeaderID: clientID}, n)
	})

	t.Run("PauseNotification", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := context.Background()
		channel := riverschema.Channel(bundle.schema, riverschema.ControlTopic)
		conn := bundle.listen(t, channel)

		// River pauses a queue it has a row for (a producer's start makes
		// it).
		_, err := bundle.pool.Exec(ctx,
			`INSERT INTO river_queue (name, created_at, updated_at) VALUES ('contract_q', now(), now())`)
		require.NoError(t, err)
		client, err := river.NewClient(riverpgxv5.New(bundle.pool), &river.Config{Schema: bundle.schema})
		require.NoError(t, err)
		require.NoError(t, client.QueuePause(ctx, "contract_q", nil))

		gotChannel, payload := wait(t, conn)
		require.Equal(t, channel, gotChannel)
		var n riverschema.ControlNotification
		decodeStrict(t, payload, &n)
		require.Equal(t, riverschema.ControlNotification{Action: riverschema.ActionPause, Queue: "contract_q"}, n)

		// tierq's SQL form goes to the same channel with the same JSON.
		_, err = bundle.pool.Exec(ctx, `SELECT `+riverschema.NotifyPauseSQL("$1::text"), "contract_q")
		require.NoError(t, err)
		gotChannel, payload = wait(t, conn)
		require.Equal(t, channel, gotChannel)
		n = riverschema.ControlNotification{}
		decodeStrict(t, payload, &n)
		require.Equal(t, riverschema.ControlNotification{Action: riverschema.ActionPause, Queue: "contract_q"}, n)

		// Resume, for the action's name.
		require.NoError(t, client.QueueResume(ctx, "contract_q", nil))
		_, payload = wait(t, conn)
		n = riverschema.ControlNotification{}
		decodeStrict(t, payload, &n)
		require.Equal(t, riverschema.ControlNotification{Action: riverschema.ActionResume, Queue: "contract_q"}, n)
	})
}
