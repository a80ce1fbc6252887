package jobs

import (
	"embed"
	"io/fs"

	"github.com/tierq/tierq/migrate"
)

// migrationFiles are the reference app's migrations: its tables, which are
// no table of tierq's.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// MigrationTable records which of the reference app's migrations have run,
// in the schema beside tierq's tierq_schema_version.
const MigrationTable = "tierq_reference_app_schema_version"

// Migrations is the reference app's migration line: its tables
// (analysis_results, spec_documents), which the analysis and specview
// workers write and its maintenance reads, recorded in MigrationTable.
// tierq's migrations (migrate.Up, `tierctl migrate`) do not create them, so
// a team's database has none of them; the reference app's worker and
// scheduler processes (internal/refapp) apply this line when they start,
// after tierq's schema check, and a test or tool that runs the reference
// app's workers without them calls Migrations().Up.
//
// Its migration 00001 takes over the tables tierq's migration 00001 created
// in every database before issue 30: where they exist it changes nothing
// and only records its version.
func Migrations() migrate.Line {
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // a literal directory of the embedded tree: cannot fail
	}
	return migrate.Line{Name: "reference app", Table: MigrationTable, FS: files}
}
