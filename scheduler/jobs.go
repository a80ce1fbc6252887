package scheduler

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/metrics"
)

// Kinds of the scheduler's own periodic jobs.
const (
	KindAgingSweep      = "aging_sweep"
	KindEscalationSweep = "escalation_sweep"
	KindDLQDrain        = "dlq_drain"
)

// AgingSweepArgs are the (empty) args of the aging sweep.
type AgingSweepArgs struct{}

func (AgingSweepArgs) Kind() string { return KindAgingSweep }

// AgingSweepWorker runs one aging sweep over every service queue
// (settings.Queues).
type AgingSweepWorker struct {
	river.WorkerDefaults[AgingSweepArgs]

	pool     *pgxpool.Pool
	logger   *slog.Logger
	metrics  *metrics.Scheduler
	settings aging.Settings
}

func (w *AgingSweepWorker) Work(ctx context.Context, _ *river.Job[AgingSweepArgs]) error {
	res, err := aging.Sweep(ctx, w.pool, w.settings)
	// Promotions of the batches that committed are counted even when a
	// later batch failed.
	for queue, n := range res.Promoted {
		w.metrics.Promoted(queue, n)
	}
	if err != nil {
		return err
	}
	logResult(ctx, w.logger, "aging sweep", res.Total, res.Promoted)
	reportSkipped(ctx, w.logger, w.metrics, "aging", res.Skipped)
	return nil
}

// EscalationSweepArgs are the (empty) args of the escalation sweep.
type EscalationSweepArgs struct{}

func (EscalationSweepArgs) Kind() string { return KindEscalationSweep }

// EscalationSweepWorker applies the automatic escalation rules once.
type EscalationSweepWorker struct {
	river.WorkerDefaults[EscalationSweepArgs]

	pool    *pgxpool.Pool
	logger  *slog.Logger
	metrics *metrics.Scheduler
	queues  []string // the service queues
	rules   []escalation.Rule
	batch   int
}

func (w *EscalationSweepWorker) Work(ctx context.Context, _ *river.Job[EscalationSweepArgs]) error {
	res, err := escalation.Sweep(ctx, w.pool, w.queues, w.rules, w.batch)
	// Moves of the batches that committed are counted even when a later
	// batch failed.
	for move, n := range res.Moved {
		w.metrics.Escalations.Add(move.From, move.To, escalation.ActorScheduler, n)
	}
	if err != nil {
		return err
	}
	logResult(ctx, w.logger, "escalation sweep", res.Total, res.Moved)
	reportSkipped(ctx, w.logger, w.metrics, "escalation", res.Skipped)
	return nil
}

// reportSkipped counts the jobs a sweep left alone and logs them once per
// sweep and reason, with their ids, so that an operator can look at the rows
// (docs/reliability.md, "Bad rows").
func reportSkipped(ctx context.Context, logger *slog.Logger, m *metrics.Scheduler, sweep string, skipped []db.Skipped) {
	for _, s := range skipped {
		m.Skipped(sweep, s.Reason, s.Count)
		logger.WarnContext(ctx, sweep+" sweep skipped jobs it cannot change",
			slog.String("reason", s.Reason), slog.Int("num_skipped", s.Count), slog.Any("job_ids", s.IDs))
	}
}

func logResult[K comparable](ctx context.Context, logger *slog.Logger, what string, total int, byKey map[K]int) {
	level := slog.LevelDebug
	if total > 0 {
		level = slog.LevelInfo
	}
	attrs := []any{slog.Int("jobs", total)}
	for k, n := range byKey {
		attrs = append(attrs, slog.Int(fmt.Sprint(k), n))
	}
	logger.Log(ctx, level, what, attrs...)
}

// DLQDrainArgs are the (empty) args of the dead-letter drain.
type DLQDrainArgs struct{}

func (DLQDrainArgs) Kind() string { return KindDLQDrain }

// DLQDrainWorker moves discarded jobs into dead_letter_jobs, then checks the
// depth alert. The alert runs after the drain has committed and never fails
// the job: a webhook that hangs delays this job by at most its timeout and
// moves nothing back.
type DLQDrainWorker struct {
	river.WorkerDefaults[DLQDrainArgs]

	pool    *pgxpool.Pool
	logger  *slog.Logger
	batch   int
	alerter *dlq.Alerter
}

func (w *DLQDrainWorker) Work(ctx context.Context, _ *river.Job[DLQDrainArgs]) error {
	res, drainErr := dlq.Drain(ctx, w.pool, w.batch)
	logResult(ctx, w.logger, "dead-letter drain", res.Moved, res.ByQueue)
	if res.Conflicts > 0 {
		w.logger.ErrorContext(ctx, "discarded jobs left in river_job: their ids are already in dead_letter_jobs (were river_job ids reused?); compare both rows and delete one",
			slog.Int("num_conflicts", res.Conflicts))
	}
	// The alert runs even when the drain failed: that is when it matters.
	depth, err := dlq.PendingDepth(ctx, w.pool)
	if err != nil {
		w.logger.ErrorContext(ctx, "dead-letter depth for the alert", slog.String("error", err.Error()))
	} else {
		w.alerter.Check(ctx, w.pool, depth)
	}
	return drainErr
}
