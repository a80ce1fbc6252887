// Package chaos is tierq's reliability suite: it starts the real binaries
// (two workers per service, two schedulers, the API) against a PostgreSQL
// cluster of its own, drives load through the API and the routing helper,
// injects faults (kill -9, a database restart, leader loss, rolling SIGTERM,
// racing operators, poison input, a database failover, a silent network
// path) and accounts for every job it inserted.
//
// The tests are behind the build tag chaos and run with `make chaos`, which
// CI runs after `make test`. docs/reliability.md says what each scenario
// proves.
package chaos
