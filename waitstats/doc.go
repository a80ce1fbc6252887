// Package waitstats records how long jobs wait, from their due time to
// their start, for the operator console: per minute, queue and tier, as
// counts in fixed histogram buckets in table job_wait_stats (migration
// 00014), summed over every worker process.
//
// A worker process's Recorder is fed by the jobs hook of package metrics
// (metrics.Jobs.WithWaits): the same wait that tierq_job_wait_seconds
// observes, from when the job's attempt became due (jobmetasql.DueAt: its
// insert, or the end of a retry's backoff or a snooze; tierq's own moves do
// not reset it) to when a worker started it. The Recorder adds the waits
// to in-memory counts per (minute, queue, tier) and, every FlushInterval
// (10 s), adds them to the table with one upsert, which also deletes the
// rows older than Retention (2 h). Replicas add to the same rows, so a row
// is the whole fleet's minute.
//
// Read is the console's side: the last 60 minutes of rows (a range of the
// primary key, never river_job), and per queue and tier the p50 and p99 of
// the last 5 and 60 minutes and the p99 of each minute.
//
// # Resolution
//
// The buckets (Bounds) are 10 per decade from 1 ms to 100,000 s: 1, 1.25,
// 1.5, 2, 2.5, 3, 4, 5, 6 and 8 × 10^k. A percentile is interpolated
// linearly inside its bucket (as Prometheus' histogram_quantile does), so
// it is exact to within its bucket's width: at most a third of the bucket's
// lower bound (2 to 2.5 s, 8 to 10 s), under a millisecond below 1 ms. A
// percentile that falls among the waits longer than 100,000 s (27.8 h) is
// reported as 100,000 s: a floor.
//
// # Windows
//
// Minutes are UTC minutes of the jobs' starts. "The last 5 minutes" are the
// current minute and the four before it, so 4 to 5 minutes of starts; "the
// last 60" the current and the 59 before. What a process observed reaches
// the table within a FlushInterval (and when it stops), so the current
// minute lags by up to 10 s.
package waitstats
