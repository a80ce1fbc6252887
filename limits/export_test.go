package limits

// LookupSQL is Lookup's statement, for EXPLAIN in tests.
var LookupSQL = lookupSQL
