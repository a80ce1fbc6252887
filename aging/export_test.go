package aging

// SweepSQL is the sweep statement over jobs available for a step (the range
// that holds nearly every job it promotes), for EXPLAIN in the benchmarks.
var SweepSQL = sweepSQL(sweepRanges[0])

// SweepRecentSQL is the sweep statement over recently moved jobs.
var SweepRecentSQL = sweepSQL(sweepRanges[1])
