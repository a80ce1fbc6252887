package escalation

// ListQuery is List's statement for p, for BenchmarkList's plans.
var ListQuery = listQuery
