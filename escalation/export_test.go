package escalation

// SweepSQL is the sweep statement, for EXPLAIN in the benchmarks.
var SweepSQL = sweepSQL
