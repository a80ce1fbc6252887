package migrate_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/migrate"
)

// need is what this build of tierq needs: River v0.51's last migration (8) of
// its main line and tierq's 00019_turns_cheaper_trigger.
var need = migrate.Version{River: 8, Tierq: 19}

func TestNeed(t *testing.T) {
	t.Parallel()
	got, err := migrate.Need()
	require.NoError(t, err)
	require.Equal(t, need, got)
}

// TestCheck: migrate.Read and migrate.Check on a real schema in each state
// a process can meet: migrated, empty, missing, rolled back to an older
// tierq version, missing a River migration, migrated by a newer tierq or
// River, and a database that does not answer.
func TestCheck(t *testing.T) {
	t.Parallel()

	type bundle struct {
		db  *testdb.DB
		ctx context.Context
	}
	setup := func(t *testing.T) *bundle {
		t.Helper()
		return &bundle{db: testdb.New(t), ctx: t.Context()}
	}
	exec := func(t *testing.T, b *bundle, sql string) {
		t.Helper()
		_, err := b.db.Pool.Exec(b.ctx, sql)
		require.NoError(t, err)
	}
	schemaError := func(t *testing.T, err error) *migrate.SchemaError {
		t.Helper()
		var se *migrate.SchemaError
		require.ErrorAs(t, err, &se)
		return se
	}

	t.Run("Migrated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st, err := migrate.Read(b.ctx, b.db.Pool, b.db.Schema)
		require.NoError(t, err)
		require.Equal(t, migrate.Status{Schema: b.db.Schema, Found: need, Need: need}, st)
		require.False(t, st.Behind())
		require.False(t, st.Newer())
		require.NoError(t, migrate.Check(b.ctx, b.db.Pool, b.db.Schema))
	})

	t.Run("SearchPath", func(t *testing.T) {
		t.Parallel()
		b := setup(t) // the pool's search_path is the schema
		st, err := migrate.Read(b.ctx, b.db.Pool, "")
		require.NoError(t, err)
		require.Equal(t, migrate.Status{Schema: b.db.Schema, Found: need, Need: need}, st)
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		schema := pgx.Identifier{b.db.Schema}.Sanitize()
		exec(t, b, "DROP SCHEMA "+schema+" CASCADE; CREATE SCHEMA "+schema)
		err := migrate.Check(b.ctx, b.db.Pool, b.db.Schema)
		se := schemaError(t, err)
		require.Equal(t, migrate.SchemaError{Schema: b.db.Schema, Need: need}, *se)
		require.Equal(t, `database schema "`+b.db.Schema+`" is not migrated (no River or tierq migration recorded; this binary needs River migration 8, tierq migration 19): run `+
			"`tierctl migrate`"+` with the same DATABASE_URL and DATABASE_SCHEMA`, err.Error())
	})

	t.Run("MissingSchema", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, "DROP SCHEMA "+pgx.Identifier{b.db.Schema}.Sanitize()+" CASCADE")
		se := schemaError(t, migrate.Check(b.ctx, b.db.Pool, b.db.Schema))
		require.Equal(t, migrate.SchemaError{Schema: b.db.Schema, Need: need}, *se)

		// Without DATABASE_SCHEMA the search_path (the dropped schema)
		// names no schema.
		se = schemaError(t, migrate.Check(b.ctx, b.db.Pool, ""))
		require.Equal(t, migrate.SchemaError{Need: need}, *se)
		require.Contains(t, se.Error(), `database schema (search_path names no existing schema) is not migrated`)
	})

	t.Run("OlderTierq", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Rolled back with goose, each migration's Down section: the
		// schema as tierq at 00008 left it.
		require.NoError(t, migrate.DownTo(b.ctx, b.db.Pool, 8))
		err := migrate.Check(b.ctx, b.db.Pool, b.db.Schema)
		se := schemaError(t, err)
		require.Equal(t, migrate.SchemaError{Schema: b.db.Schema, Found: migrate.Version{River: 8, Tierq: 8}, Need: need}, *se)
		require.Equal(t, `database schema "`+b.db.Schema+`" is older than this binary (found River migration 8, tierq migration 8; needs River migration 8, tierq migration 19): run `+
			"`tierctl migrate`"+` with the same DATABASE_URL and DATABASE_SCHEMA`, err.Error())

		// tierctl migrate's Up brings it back.
		_, err = migrate.Up(b.ctx, b.db.Pool, b.db.Schema, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.NoError(t, migrate.Check(b.ctx, b.db.Pool, b.db.Schema))
	})

	t.Run("OlderRiver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `DELETE FROM river_migration WHERE line = 'main' AND version = 8`)
		se := schemaError(t, migrate.Check(b.ctx, b.db.Pool, b.db.Schema))
		require.Equal(t, migrate.Version{River: 7, Tierq: 19}, se.Found)
	})

	t.Run("Newer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A newer tierq's migration 00020 and a newer River's 9.
		exec(t, b, `INSERT INTO tierq_schema_version (version_id, is_applied) VALUES (20, true)`)
		exec(t, b, `INSERT INTO river_migration (line, version) VALUES ('main', 9)`)
		st, err := migrate.Read(b.ctx, b.db.Pool, b.db.Schema)
		require.NoError(t, err)
		require.Equal(t, migrate.Version{River: 9, Tierq: 20}, st.Found)
		require.True(t, st.Newer())
		require.False(t, st.Behind())
		require.NoError(t, st.Err())
		require.NoError(t, migrate.Check(b.ctx, b.db.Pool, b.db.Schema))
	})

	t.Run("NewerRiverOlderTierq", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		exec(t, b, `INSERT INTO river_migration (line, version) VALUES ('main', 9)`)
		require.NoError(t, migrate.DownTo(b.ctx, b.db.Pool, 10))
		st, err := migrate.Read(b.ctx, b.db.Pool, b.db.Schema)
		require.NoError(t, err)
		require.False(t, st.Newer())
		se := schemaError(t, st.Err())
		require.Equal(t, migrate.Version{River: 9, Tierq: 10}, se.Found)
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		// Port 1 on loopback: nothing listens, the connection is refused.
		pool, err := pgxpool.New(t.Context(), "postgres://postgres@127.0.0.1:1/tierq?sslmode=disable&connect_timeout=5")
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		err = migrate.Check(t.Context(), pool, "public")
		require.Error(t, err)
		var se *migrate.SchemaError
		require.False(t, errors.As(err, &se))
		require.Contains(t, err.Error(), "read schema version: ")
	})
}

// TestDownFrom19RestoresTheTurnFunctions: migration 00019's Down puts back
// the turn trigger and tag function as 00017 and 00018 left them, each with
// the schema as its search_path (00019 names the schema in their bodies
// instead), and Up applies 00019 again.
func TestDownFrom19RestoresTheTurnFunctions(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := t.Context()
	configs := func() map[string]string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT proname::text, array_to_string(proconfig, ' ') FROM pg_proc
			WHERE proname IN ('tierq_tenant_turn', 'tierq_turn_tag') AND pronamespace = current_schema()::regnamespace`)
		require.NoError(t, err)
		got := map[string]string{}
		for rows.Next() {
			var name, config string
			require.NoError(t, rows.Scan(&name, &config))
			got[name] = config
		}
		require.NoError(t, rows.Err())
		return got
	}
	require.Equal(t, map[string]string{
		"tierq_tenant_turn": "plan_cache_mode=force_generic_plan",
		"tierq_turn_tag":    "plan_cache_mode=force_generic_plan",
	}, configs())

	require.NoError(t, migrate.DownTo(ctx, db.Pool, 18))
	withPath := "plan_cache_mode=force_generic_plan search_path=" + db.Schema + ", pg_catalog"
	require.Equal(t, map[string]string{"tierq_tenant_turn": withPath, "tierq_turn_tag": withPath}, configs())
	var src string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'tierq_turn_tag' AND pronamespace = current_schema()::regnamespace`).Scan(&src))
	require.Contains(t, src, "IF last IS NULL OR last < head THEN") // 00018's

	res, err := migrate.Up(ctx, db.Pool, db.Schema, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, []int64{19}, res.TierqApplied)
	require.Equal(t, "plan_cache_mode=force_generic_plan", configs()["tierq_turn_tag"])
}
