package fairshare

// PassSQL is the pass statement, for EXPLAIN in benchmarks.
var PassSQL = passSQL
