package dlq

// DrainSQL is the drain statement, for EXPLAIN in tests.
const DrainSQL = drainSQL
