package migrate_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/migrate"
)

// invoices is a team's own migration line: two migrations of a table of
// its own.
func invoices() migrate.Line {
	return migrate.Line{Name: "invoices", Table: "invoices_schema_version", FS: fstest.MapFS{
		"00001_invoices.sql": {Data: []byte(`-- +goose Up
CREATE TABLE invoices (id bigint PRIMARY KEY);

-- +goose Down
DROP TABLE invoices;
`)},
		"00002_invoices_total.sql": {Data: []byte(`-- +goose Up
ALTER TABLE invoices ADD COLUMN total bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE invoices DROP COLUMN total;
`)},
	}}
}

// TestLine: an application's own migration line applies to a schema that
// tierq's migrations made, records its versions in its own table (tierq's
// stay as they were, and Check still passes), logs what it applied, finds
// nothing the second time, leaves versions a newer build recorded, and
// applies once when two processes start at once.
func TestLine(t *testing.T) {
	t.Parallel()

	type bundle struct {
		db  *testdb.DB
		ctx context.Context
		log *bytes.Buffer
	}
	setup := func(t *testing.T) *bundle {
		t.Helper()
		return &bundle{db: testdb.NewCore(t), ctx: t.Context(), log: &bytes.Buffer{}}
	}
	logger := func(b *bundle) *slog.Logger {
		return slog.New(slog.NewTextHandler(b.log, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))
	}
	versions := func(t *testing.T, b *bundle, table string) []int64 {
		t.Helper()
		var v []int64
		require.NoError(t, b.db.Pool.QueryRow(b.ctx,
			`SELECT coalesce(array_agg(version_id ORDER BY version_id), '{}') FROM `+table+` WHERE version_id > 0`).Scan(&v))
		return v
	}

	t.Run("Applies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tierq := versions(t, b, "tierq_schema_version")
		res, err := invoices().Up(b.ctx, b.db.Pool, b.db.Schema, logger(b))
		require.NoError(t, err)
		require.Equal(t, &migrate.LineResult{Applied: []int64{1, 2}, Version: 2}, res)
		require.Equal(t, `level=INFO msg="invoices migrations applied" schema=`+b.db.Schema+" applied=\"[1 2]\" version=2\n", b.log.String())

		require.Equal(t, []int64{1, 2}, versions(t, b, "invoices_schema_version"))
		require.Equal(t, tierq, versions(t, b, "tierq_schema_version"), "tierq's versions untouched")
		require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM invoices WHERE total <> 0`))
		require.NoError(t, migrate.Check(b.ctx, b.db.Pool, b.db.Schema))

		// Again: nothing to apply, nothing logged.
		b.log.Reset()
		res, err = invoices().Up(b.ctx, b.db.Pool, b.db.Schema, logger(b))
		require.NoError(t, err)
		require.Equal(t, &migrate.LineResult{Version: 2}, res)
		require.Empty(t, b.log.String())
	})

	t.Run("Newer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := invoices().Up(b.ctx, b.db.Pool, b.db.Schema, nil)
		require.NoError(t, err)
		// A newer build's 00003, applied during a rolling deploy.
		_, err = b.db.Pool.Exec(b.ctx, `INSERT INTO invoices_schema_version (version_id, is_applied) VALUES (3, true)`)
		require.NoError(t, err)
		res, err := invoices().Up(b.ctx, b.db.Pool, b.db.Schema, nil)
		require.NoError(t, err)
		require.Equal(t, &migrate.LineResult{Version: 3}, res)
	})

	t.Run("Concurrently", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		results := make(chan *migrate.LineResult, 2)
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				res, err := invoices().Up(b.ctx, b.db.Pool, b.db.Schema, nil)
				results <- res
				errs <- err
			}()
		}
		var applied [][]int64
		for range 2 {
			require.NoError(t, <-errs)
			applied = append(applied, (<-results).Applied)
		}
		require.ElementsMatch(t, [][]int64{{1, 2}, nil}, applied, "one run applies the line, the other waits on the lock and finds nothing")
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		files := invoices().FS
		tests := []struct {
			name string
			give migrate.Line
			want string
		}{
			{"NoName", migrate.Line{Table: "t", FS: files}, "migrate: line: Name is required"},
			{"NoTable", migrate.Line{Name: "invoices", FS: files}, "migrate: line invoices: Table is required"},
			{"TierqsTable", migrate.Line{Name: "invoices", Table: "tierq_schema_version", FS: files},
				"migrate: line invoices: Table tierq_schema_version is not the line's own (it records tierq's or River's migrations)"},
			{"RiversTable", migrate.Line{Name: "invoices", Table: "river_migration", FS: files},
				"migrate: line invoices: Table river_migration is not the line's own (it records tierq's or River's migrations)"},
			{"NoFS", migrate.Line{Name: "invoices", Table: "t"}, "migrate: line invoices: FS is required"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				// Refused before any connection: no pool needed.
				_, err := tt.give.Up(t.Context(), nil, "public", nil)
				require.EqualError(t, err, tt.want)
			})
		}
	})
}

// TestNoReferenceTablesInATeamsDatabase: tierq's migration 00001 is a
// no-op since issue 30 (its version still recorded), so a schema tierq's
// migrations alone made has no analysis_results or spec_documents.
func TestNoReferenceTablesInATeamsDatabase(t *testing.T) {
	t.Parallel()
	db := testdb.NewCore(t)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_catalog.pg_tables
		WHERE schemaname = $1 AND tablename IN ('analysis_results', 'spec_documents', 'tierq_reference_app_schema_version')`, db.Schema))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM tierq_schema_version WHERE version_id = 1 AND is_applied`))
}
