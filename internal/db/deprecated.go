package db

import (
	"time"

	"github.com/tierq/tierq/internal/jobmetasql"
)

// The job metadata SQL that was here is package jobmetasql's, beside
// jobmeta's keys. These forwarders keep the packages that still call them
// building; each goes once its callers have moved.

// DueAtSQL is jobmetasql.DueAtSQL.
//
// Deprecated: use jobmetasql.DueAtSQL; this stays until the packages still
// calling it (api, bench, ctl, fairshare, cmd/tierctl) have moved.
func DueAtSQL(alias string) string { return jobmetasql.DueAtSQL(alias) }

// DueAt is jobmetasql.DueAt.
//
// Deprecated: use jobmetasql.DueAt; this stays until metrics has moved.
func DueAt(scheduledAt time.Time, metadata []byte) time.Time {
	return jobmetasql.DueAt(scheduledAt, metadata)
}

// TierSQL is jobmetasql.TierSQL.
//
// Deprecated: use jobmetasql.TierSQL; this stays until ctl has moved.
func TierSQL(alias string) string { return jobmetasql.TierSQL(alias) }
