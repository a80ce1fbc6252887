// Package riverschema owns the parts of River's schema and protocol that
// tierq relies on beyond River's Go API: the names of River's tables,
// columns, job states, indexes and SQL function that tierq's own SQL reads
// and writes, and the notifications River's clients exchange through
// PostgreSQL's LISTEN/NOTIFY (the insert notification that wakes a queue's
// fetch, the leadership "resigned" message that makes followers bid at
// once, and the control message that pauses a queue's producers).
//
// None of these are River's public API: they are River's internals as of
// the River version in go.mod (v0.51.x). Every one of them is checked by
// this package's contract test (TestContract) against a schema migrated
// with that version's rivermigrate and against a real River client, so a
// River upgrade that renames, retypes or drops one fails there, in one
// place, instead of in whichever query used it.
//
// tierq's SQL stays beside the concept it belongs to; it builds on these
// names (the constants, and the SQL fragments such as NotifyInsertSQL,
// NotifyResignedSQL and NotifyPauseSQL) rather than spelling River's internals itself.
//
// The package is internal: the names are River's, not tierq's, and a
// library user writing SQL against River should read River's own schema.
// It can be made public if tierq's library API ever needs to hand them out.
package riverschema
