// Package upgradetest holds the upgrade test (issue 16): a database written
// by the tierq releases that kept the tier only in a job's args and their
// bookkeeping under the legacy "tierq_" metadata keys, with jobs in every
// River state and dead letters, is migrated and run by today's scheduler,
// workers and API, and nothing is lost or miscounted. It has no code of its
// own; see upgrade_test.go.
package upgradetest
