package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
)

// Kinds of the analyzer's maintenance: cron jobs the scheduler deployment
// runs and works in its own queue (scheduler.Queue), attached to the
// analyzer service as its periodic jobs and periodic kinds.
const (
	KindReanalyzeStale = "reanalyze_stale"
	KindRetention      = "retention"
)

// Maintenance configures the analyzer's periodic jobs, which the scheduler
// deployment runs (Deps.Maintenance): re-analysis of stale targets and
// retention of results and spec documents. LoadMaintenance reads it from the
// scheduler's environment (MaintenanceConfig).
type Maintenance struct {
	// ReanalyzeSchedule is when stale targets are re-analysed
	// (REANALYZE_CRON, read in CRON_TZ). Required.
	ReanalyzeSchedule river.PeriodicSchedule
	// ReanalyzeStaleAfter is the age of a target's latest result that makes
	// it stale (REANALYZE_STALE_AFTER).
	ReanalyzeStaleAfter time.Duration
	// MaxAttempts is the max_attempts of the re-analysis jobs (MAX_ATTEMPTS)
	// when the analysis kind declares none (service.MaxAttempts).
	MaxAttempts int
	// RetentionSchedule is when old results and spec documents are deleted
	// (RETENTION_CRON, read in CRON_TZ). Required.
	RetentionSchedule river.PeriodicSchedule
	// RetentionPeriod is how long results and spec documents are kept
	// (RETENTION_PERIOD).
	RetentionPeriod time.Duration
	// Batch is the most rows one retention statement deletes (SWEEP_BATCH).
	Batch int
}

// LogAttrs are the settings the scheduler logs when it starts
// (scheduler.Config.LogAttrs): the schedules' next runs, since a schedule has no
// text of its own, and the ages.
func (m *Maintenance) LogAttrs() []slog.Attr {
	now := time.Now()
	var attrs []slog.Attr
	if m.ReanalyzeSchedule != nil {
		attrs = append(attrs, slog.Time("reanalyze_next", m.ReanalyzeSchedule.Next(now)))
	}
	attrs = append(attrs, slog.Duration("reanalyze_stale_after", m.ReanalyzeStaleAfter))
	if m.RetentionSchedule != nil {
		attrs = append(attrs, slog.Time("retention_next", m.RetentionSchedule.Next(now)))
	}
	return append(attrs, slog.Duration("retention_period", m.RetentionPeriod))
}

// errNoSchedule is returned for a Maintenance without its schedules.
var errNoSchedule = errors.New("maintenance: the re-analysis and retention schedules are required")

// periodic are the analyzer's periodic jobs, each a cron job of the
// scheduler (scheduler.CronJob), and the kinds they insert, which the
// scheduler works. analysisBaseQueue is the base queue of the re-analysis
// jobs and analysis their kind, whose declared attempts they get
// (MaxAttempts when it declares none).
func (m *Maintenance) periodic(deps Deps, analysisBaseQueue string, analysis service.Kind) ([]*river.PeriodicJob, []service.Kind, error) {
	if m.ReanalyzeSchedule == nil || m.RetentionSchedule == nil {
		return nil, nil, errNoSchedule
	}
	jobs := []*river.PeriodicJob{
		scheduler.CronJob(KindReanalyzeStale, m.ReanalyzeSchedule, ReanalyzeStaleArgs{}),
		scheduler.CronJob(KindRetention, m.RetentionSchedule, RetentionArgs{}),
	}
	kinds := []service.Kind{
		service.WorkerKind(&ReanalyzeStaleWorker{pool: deps.Pool, logger: deps.Logger, baseQueue: analysisBaseQueue,
			staleAfter: m.ReanalyzeStaleAfter, maxAttempts: cmp.Or(analysis.MaxAttempts(), m.MaxAttempts)}, service.Timeout[ReanalyzeStaleArgs](ReanalyzeStaleTimeout)),
		service.WorkerKind(&RetentionWorker{pool: deps.Pool, logger: deps.Logger, period: m.RetentionPeriod, batch: m.Batch},
			service.Timeout[RetentionArgs](RetentionTimeout)),
	}
	return jobs, kinds, nil
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
	baseQueue   string
	staleAfter  time.Duration
	maxAttempts int
}

var _ river.Worker[ReanalyzeStaleArgs] = (*ReanalyzeStaleWorker)(nil)

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
			stale, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AnalysisArgs])
			if err != nil {
				return fmt.Errorf("find stale targets: %w", err)
			}
			params := make([]river.InsertManyParams, len(stale))
			for i, args := range stale {
				opts := routing.InsertOptsFor(w.baseQueue, routing.TierOrDefault(ctx, w.logger, args.Tier), args.UserID, true)
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

var _ river.Worker[RetentionArgs] = (*RetentionWorker)(nil)

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
	total := deleted["spec_documents"] + deleted["analysis_results"]
	level := slog.LevelDebug
	if total > 0 {
		level = slog.LevelInfo
	}
	w.logger.Log(ctx, level, "retention", slog.Int("jobs", total),
		slog.Int("spec_documents", deleted["spec_documents"]), slog.Int("analysis_results", deleted["analysis_results"]))
	return nil
}
