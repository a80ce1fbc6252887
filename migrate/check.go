package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"path"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/tierq/tierq/internal/riverschema"
)

// Version is a schema's migration versions: River's (the highest version
// of River's main migration line recorded in river_migration) and tierq's
// (the highest version_id goose recorded in tierq_schema_version). 0 means
// none recorded (the table does not exist or is empty).
type Version struct {
	River int
	Tierq int64
}

func (v Version) String() string {
	return fmt.Sprintf("River migration %d, tierq migration %d", v.River, v.Tierq)
}

// Status is a database schema's versions (Found) beside the versions this
// build of tierq needs (Need: its latest River and tierq migrations).
type Status struct {
	// Schema is the schema read: the one given, or the connection's
	// current_schema() when none was ("" when the search_path names no
	// existing schema).
	Schema string
	Found  Version
	Need   Version
}

// Behind reports whether a River or tierq migration this build needs has
// not been applied: its processes must not start (Err).
func (s Status) Behind() bool {
	return s.Found.River < s.Need.River || s.Found.Tierq < s.Need.Tierq
}

// Newer reports whether the schema has River or tierq migrations this build
// does not know of, and none missing: a newer tierq migrated the database
// (a rolling deploy runs the old processes beside the new ones). Migrations
// add and never take away what older processes use, so they keep working.
func (s Status) Newer() bool {
	return !s.Behind() && (s.Found.River > s.Need.River || s.Found.Tierq > s.Need.Tierq)
}

// Err is a *SchemaError when the schema is behind, nil otherwise (also
// when it is newer).
func (s Status) Err() error {
	if !s.Behind() {
		return nil
	}
	return &SchemaError{Schema: s.Schema, Found: s.Found, Need: s.Need}
}

// SchemaError is a database schema older than this build of tierq needs:
// not migrated at all, or missing River or tierq migrations. The fix is
// `tierctl migrate` with the same DATABASE_URL and DATABASE_SCHEMA. Match
// it with errors.As.
type SchemaError struct {
	// Schema is the schema checked ("" when the search_path names none
	// that exists).
	Schema string
	// Found is what the schema records; Need is what this build needs.
	Found, Need Version
}

func (e *SchemaError) Error() string {
	where := "database schema " + quoteSchema(e.Schema)
	if e.Found == (Version{}) {
		return fmt.Sprintf("%s is not migrated (no River or tierq migration recorded; this binary needs %s): run `tierctl migrate` with the same DATABASE_URL and DATABASE_SCHEMA",
			where, e.Need)
	}
	return fmt.Sprintf("%s is older than this binary (found %s; needs %s): run `tierctl migrate` with the same DATABASE_URL and DATABASE_SCHEMA",
		where, e.Found, e.Need)
}

func quoteSchema(schema string) string {
	if schema == "" {
		return "(search_path names no existing schema)"
	}
	return fmt.Sprintf("%q", schema)
}

// Need is the River and tierq migration versions this build of tierq
// applies last: what its processes need.
func Need() (Version, error) {
	migrator, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		return Version{}, fmt.Errorf("migrate: river migrator: %w", err)
	}
	var need Version
	for _, m := range migrator.AllVersions() {
		need.River = max(need.River, m.Version)
	}
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return Version{}, fmt.Errorf("migrate: embedded files: %w", err)
	}
	for _, f := range files {
		v, err := goose.NumericComponent(path.Base(f))
		if err != nil {
			return Version{}, fmt.Errorf("migrate: %s: %w", f, err)
		}
		need.Tierq = max(need.Tierq, v)
	}
	return need, nil
}

// tablesSQL finds, in schema $1, the two version tables and whether
// river_migration has River's line column (added by River's migration 5;
// before it every row is of the main line).
const tablesSQL = `
SELECT
	EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = '` + riverschema.MigrationTable + `'),
	EXISTS (SELECT 1 FROM information_schema.columns
	        WHERE table_schema = $1 AND table_name = '` + riverschema.MigrationTable + `' AND column_name = '` + riverschema.MigrationLine + `'),
	EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = '` + versionTable + `')`

// Read reads schema's recorded River and tierq migration versions (schema
// empty: the connection's current_schema()). It only reads: it creates
// nothing, takes no lock, and works on a schema migrated by a newer tierq.
// An error is the database's (unreachable, say), never the schema's being
// behind: see Status.Err.
func Read(ctx context.Context, pool *pgxpool.Pool, schema string) (Status, error) {
	need, err := Need()
	if err != nil {
		return Status{}, err
	}
	st := Status{Schema: schema, Need: need}
	if schema == "" {
		var current *string
		if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&current); err != nil {
			return Status{}, fmt.Errorf("read schema version: %w", err)
		}
		if current == nil {
			return st, nil
		}
		st.Schema = *current
	}
	var riverTable, lineColumn, tierqTable bool
	if err := pool.QueryRow(ctx, tablesSQL, st.Schema).Scan(&riverTable, &lineColumn, &tierqTable); err != nil {
		return Status{}, fmt.Errorf("read schema version: %w", err)
	}
	if riverTable {
		q := `SELECT coalesce(max(` + riverschema.MigrationVer + `), 0) FROM ` + pgx.Identifier{st.Schema, riverschema.MigrationTable}.Sanitize()
		if lineColumn {
			q += ` WHERE ` + riverschema.MigrationLine + ` = '` + riverschema.MainLine + `'`
		}
		if err := pool.QueryRow(ctx, q).Scan(&st.Found.River); err != nil {
			return Status{}, fmt.Errorf("read River's schema version: %w", err)
		}
	}
	if tierqTable {
		q := `SELECT coalesce(max(version_id), 0) FROM ` + pgx.Identifier{st.Schema, versionTable}.Sanitize()
		if err := pool.QueryRow(ctx, q).Scan(&st.Found.Tierq); err != nil {
			return Status{}, fmt.Errorf("read tierq's schema version: %w", err)
		}
	}
	return st, nil
}

// Check returns a *SchemaError when schema (empty: the connection's
// current_schema()) lacks a River or tierq migration this build needs,
// nil when it has them all (or more: a newer tierq migrated it), and the
// database's error when it cannot be read. Every tierq process but
// `tierctl migrate` checks before it starts.
func Check(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	st, err := Read(ctx, pool, schema)
	if err != nil {
		return err
	}
	return st.Err()
}
