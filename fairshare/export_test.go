package fairshare

// PassSQL is the pass statement, for EXPLAIN in benchmarks.
var PassSQL = passSQL

// CheckSQL is a tick's check of a queue of one tenant, for benchmarks.
var CheckSQL = checkSQL

// LoneCheckSQL is a look at a queue of one tenant, for benchmarks.
var LoneCheckSQL = loneCheckSQL
