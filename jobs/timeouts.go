package jobs

import "time"

// How long one attempt of each kind may run before River cancels its
// context. Each kind declares its timeout where the kind is made
// (service.Timeout in AnalyzerService, SpecGenService, the maintenance's
// periodic kinds and LoadTestKind), a constant, the same in every process:
// River applies it twice, in the worker that runs the job (its context's
// deadline) and in the leader's rescuer (which leaves a `running` job alone
// until it is older than its kind's timeout). A timeout that came from each
// process's environment (JOB_TIMEOUT, before) could differ between the two,
// and a leader with a shorter one rescued, and ran a second time, jobs that
// a worker with a longer one was still running.
//
// The scheduler refuses to start unless RESCUE_STUCK_JOBS_AFTER is longer
// than every kind's timeout (scheduler.Timeouts, read from the registry),
// so these stay short: a
// crashed worker's job is retried only after its kind's timeout at the
// earliest. No kind may have none (-1): the rescuer would never retry it.
const (
	// AnalysisTimeout bounds one scan of a checkout. The scan stops by
	// itself after 200,000 entries (scan.Options.MaxFiles); a 30,000-entry
	// tree (12,800 of Go's own sources) scans in 6 to 7 s (2 to 3 s) on a
	// two-core machine with a warm page cache, so the largest target
	// accepted takes about 45 s.
	AnalysisTimeout = time.Minute

	// SpecViewTimeout bounds rendering one analysis result: one row read,
	// rendered in memory, one row written; milliseconds even for tens of
	// thousands of tests.
	SpecViewTimeout = 30 * time.Second

	// ReanalyzeStaleTimeout bounds the re-analysis cron job: pages of 500
	// stale targets, each one insert of their analysis jobs.
	ReanalyzeStaleTimeout = time.Minute

	// RetentionTimeout bounds the retention cron job: batched deletes of a
	// day's old results, each batch its own short transaction, so a run cut
	// short keeps what it deleted and the next run carries on.
	RetentionTimeout = time.Minute
)
