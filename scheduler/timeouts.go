package scheduler

import (
	"time"

	"github.com/riverqueue/river"

	"github.com/tierq/tierq/jobs"
)

// Timeouts of the scheduler's own kinds; see package jobs for why each kind
// has a constant of its own. Every sweep works in batches of at most
// SWEEP_BATCH (DLQ_DRAIN_BATCH) rows, each batch its own short transaction,
// so a run cut short by its timeout keeps what it did, and the next period
// carries on.
const (
	// AgingSweepTimeout: a backlog of a million waiting jobs is a thousand
	// batch statements of a few milliseconds each.
	AgingSweepTimeout = time.Minute
	// EscalationSweepTimeout: as the aging sweep.
	EscalationSweepTimeout = time.Minute
	// ReanalyzeStaleTimeout: pages of 500 stale targets, each one insert of
	// their analysis jobs.
	ReanalyzeStaleTimeout = time.Minute
	// RetentionTimeout: batched deletes of a day's old results.
	RetentionTimeout = time.Minute
	// DLQDrainTimeout covers the drain and the depth alert after it, whose
	// webhook call is bounded by DLQ_ALERT_TIMEOUT (at most
	// config.MaxDLQAlertTimeout, half of this).
	DLQDrainTimeout = time.Minute
)

// Timeouts returns every job kind the scheduler registers (RiverConfig) with
// its timeout: the kinds of package jobs, which it registers so that its
// rescuer retries them, and its own. RESCUE_STUCK_JOBS_AFTER must be longer
// than each (config.Scheduler.CheckKindTimeouts).
func Timeouts() map[string]time.Duration {
	timeouts := jobs.Timeouts()
	timeouts[KindAgingSweep] = AgingSweepTimeout
	timeouts[KindEscalationSweep] = EscalationSweepTimeout
	timeouts[KindReanalyzeStale] = ReanalyzeStaleTimeout
	timeouts[KindRetention] = RetentionTimeout
	timeouts[KindDLQDrain] = DLQDrainTimeout
	return timeouts
}

// Timeout is AgingSweepTimeout.
func (*AgingSweepWorker) Timeout(*river.Job[AgingSweepArgs]) time.Duration { return AgingSweepTimeout }

// Timeout is EscalationSweepTimeout.
func (*EscalationSweepWorker) Timeout(*river.Job[EscalationSweepArgs]) time.Duration {
	return EscalationSweepTimeout
}

// Timeout is ReanalyzeStaleTimeout.
func (*ReanalyzeStaleWorker) Timeout(*river.Job[ReanalyzeStaleArgs]) time.Duration {
	return ReanalyzeStaleTimeout
}

// Timeout is RetentionTimeout.
func (*RetentionWorker) Timeout(*river.Job[RetentionArgs]) time.Duration { return RetentionTimeout }

// Timeout is DLQDrainTimeout.
func (*DLQDrainWorker) Timeout(*river.Job[DLQDrainArgs]) time.Duration { return DLQDrainTimeout }

var (
	_ river.Worker[AgingSweepArgs]      = (*AgingSweepWorker)(nil)
	_ river.Worker[EscalationSweepArgs] = (*EscalationSweepWorker)(nil)
	_ river.Worker[ReanalyzeStaleArgs]  = (*ReanalyzeStaleWorker)(nil)
	_ river.Worker[RetentionArgs]       = (*RetentionWorker)(nil)
	_ river.Worker[DLQDrainArgs]        = (*DLQDrainWorker)(nil)
)
