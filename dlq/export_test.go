package dlq

// DrainSQL is the drain statement, for EXPLAIN in tests.
const DrainSQL = drainSQL

// ListSQL is List's statement, for EXPLAIN.
func ListSQL(f Filter, page Page) (string, []any) { return listSQL(f, page) }
