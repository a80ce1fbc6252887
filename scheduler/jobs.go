package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
)

// Kinds of the scheduler's periodic jobs.
const (
	KindAgingSweep      = "aging_sweep"
	KindEscalationSweep = "escalation_sweep"
	KindReanalyzeStale  = "reanalyze_stale"
	KindRetention       = "retention"
	KindDLQDrain        = "dlq_drain"
)

// AgingSweepArgs are the (empty) args of the aging sweep.
type AgingSweepArgs struct{}

func (AgingSweepArgs) Kind() string { return KindAgingSweep }

// AgingSweepWorker runs one aging sweep over every service queue.
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
	rules   []escalation.Rule
	batch   int
}

func (w *EscalationSweepWorker) Work(ctx context.Context, _ *river.Job[EscalationSweepArgs]) error {
	res, err := escalation.Sweep(ctx, w.pool, routing.Queues(), w.rules, w.batch)
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

// ReanalyzeStaleArgs are the (empty) args of the re-analysis cron job.
type ReanalyzeStaleArgs struct{}

func (ReanalyzeStaleArgs) Kind() string { return KindReanalyzeStale }

// ReanalyzeStaleWorker inserts an analysis job into analysis_scheduled for
// every target whose latest result is older than staleAfter, unique by target
// while one is queued or running (producer.UniqueOpts), so a target whose
// re-analysis is still waiting is not queued twice.
type ReanalyzeStaleWorker struct {
	river.WorkerDefaults[ReanalyzeStaleArgs]

	pool        *pgxpool.Pool
	logger      *slog.Logger
	staleAfter  time.Duration
	maxAttempts int
}

// reanalyzePage is the most targets read and inserted per transaction.
const reanalyzePage = 500

// staleTargetsSQL walks targets in order from $1 through the (target,
// created_at DESC) index, keeping each target's latest result when it is
// older than $2 seconds.
const staleTargetsSQL = `
SELECT target, user_id, tier FROM (
    SELECT DISTINCT ON (target) target, user_id, tier, created_at
    FROM analysis_results
    WHERE target > $1
    ORDER BY target, created_at DESC
) AS latest
WHERE created_at < now() - make_interval(secs => $2)
ORDER BY target
LIMIT $3`

func (w *ReanalyzeStaleWorker) Work(ctx context.Context, _ *river.Job[ReanalyzeStaleArgs]) error {
	client := river.ClientFromContext[pgx.Tx](ctx)
	after, inserted, duplicates := "", 0, 0
	for {
		n := 0
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, staleTargetsSQL, after, w.staleAfter.Seconds(), reanalyzePage)
			if err != nil {
				return fmt.Errorf("find stale targets: %w", err)
			}
			stale, err := pgx.CollectRows(rows, pgx.RowToStructByPos[jobs.AnalysisArgs])
			if err != nil {
				return fmt.Errorf("find stale targets: %w", err)
			}
			params := make([]river.InsertManyParams, len(stale))
			for i, args := range stale {
				opts := routing.InsertOptsFor(routing.Analyzer.BaseQueue(), routing.TierOrDefault(ctx, w.logger, args.Tier), args.UserID, true)
				opts.UniqueOpts = producer.UniqueOpts()
				opts.MaxAttempts = w.maxAttempts
				params[i] = river.InsertManyParams{Args: args, InsertOpts: opts}
			}
			n = len(stale)
			if n == 0 {
				return nil
			}
			after = stale[n-1].Target
			results, err := client.InsertManyTx(ctx, tx, params)
			if err != nil {
				return fmt.Errorf("insert re-analysis jobs: %w", err)
			}
			for _, r := range results {
				if r.UniqueSkippedAsDuplicate {
					duplicates++
				} else {
					inserted++
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if n < reanalyzePage {
			break
		}
	}
	w.logger.InfoContext(ctx, "re-analysis of stale targets queued",
		slog.Int("inserted", inserted), slog.Int("already_queued", duplicates), slog.Duration("stale_after", w.staleAfter))
	return nil
}

// RetentionArgs are the (empty) args of the retention cron job.
type RetentionArgs struct{}

func (RetentionArgs) Kind() string { return KindRetention }

// RetentionWorker deletes spec documents and analysis results older than
// period, at most batch rows per statement, each statement its own short
// transaction.
type RetentionWorker struct {
	river.WorkerDefaults[RetentionArgs]

	pool   *pgxpool.Pool
	logger *slog.Logger
	period time.Duration
	batch  int
}

// Table names are constants, never input.
var retentionSQL = map[string]string{
	"spec_documents":   retentionDelete("spec_documents"),
	"analysis_results": retentionDelete("analysis_results"),
}

func retentionDelete(table string) string {
	return `
WITH doomed AS (
    SELECT id FROM ` + table + `
    WHERE created_at < now() - make_interval(secs => $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM ` + table + ` AS t USING doomed WHERE t.id = doomed.id`
}

func (w *RetentionWorker) Work(ctx context.Context, _ *river.Job[RetentionArgs]) error {
	deleted := map[string]int{}
	// Documents first, so that deleting a result rarely has documents left
	// to cascade to.
	for _, table := range []string{"spec_documents", "analysis_results"} {
		for {
			tag, err := w.pool.Exec(ctx, retentionSQL[table], w.period.Seconds(), w.batch)
			if err != nil {
				return fmt.Errorf("retention: delete from %s: %w", table, err)
			}
			deleted[table] += int(tag.RowsAffected())
			if tag.RowsAffected() < int64(w.batch) {
				break
			}
		}
	}
	logResult(ctx, w.logger, "retention", deleted["spec_documents"]+deleted["analysis_results"], deleted)
	return nil
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
