package scheduler

import (
	"time"

	"github.com/riverqueue/river"
)

// Timeouts of the scheduler's own kinds. Each kind's timeout is a constant,
// the same in every process: River applies it in the process that runs the
// job and in the leader's rescuer alike (see package jobs). Every sweep works in batches of at most
// SWEEP_BATCH (DLQ_DRAIN_BATCH) rows, each batch its own short transaction,
// so a run cut short by its timeout keeps what it did, and the next period
// carries on.
const (
	// AgingSweepTimeout: a backlog of a million waiting jobs is a thousand
	// batch statements of a few milliseconds each.
	AgingSweepTimeout = time.Minute
	// EscalationSweepTimeout: as the aging sweep.
	EscalationSweepTimeout = time.Minute
	// DLQDrainTimeout covers the drain and the depth alert after it, whose
	// webhook call is bounded by DLQ_ALERT_TIMEOUT (at most
	// config.MaxDLQAlertTimeout, half of this).
	DLQDrainTimeout = time.Minute
)

// Timeouts returns the scheduler's own kinds with their timeouts. The
// scheduler registers its services' kinds too (RiverConfig), and
// RESCUE_STUCK_JOBS_AFTER must be longer than the timeout of each of them
// all (config.Scheduler.CheckKindTimeouts): the application gives Run its
// services' timeouts with KindTimeouts, as cmd/scheduler gives
// jobs.Timeouts.
func Timeouts() map[string]time.Duration {
	return map[string]time.Duration{
		KindAgingSweep:      AgingSweepTimeout,
		KindEscalationSweep: EscalationSweepTimeout,
		KindDLQDrain:        DLQDrainTimeout,
	}
}

// Timeout is AgingSweepTimeout.
func (*AgingSweepWorker) Timeout(*river.Job[AgingSweepArgs]) time.Duration { return AgingSweepTimeout }

// Timeout is EscalationSweepTimeout.
func (*EscalationSweepWorker) Timeout(*river.Job[EscalationSweepArgs]) time.Duration {
	return EscalationSweepTimeout
}

// Timeout is DLQDrainTimeout.
func (*DLQDrainWorker) Timeout(*river.Job[DLQDrainArgs]) time.Duration { return DLQDrainTimeout }

var (
	_ river.Worker[AgingSweepArgs]      = (*AgingSweepWorker)(nil)
	_ river.Worker[EscalationSweepArgs] = (*EscalationSweepWorker)(nil)
	_ river.Worker[DLQDrainArgs]        = (*DLQDrainWorker)(nil)
)
