package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/jobs/scan"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// KindAnalysis is the kind of analysis jobs.
const KindAnalysis = "analysis"

// AnalysisArgs are the args of an analysis job. JSON:
//
//	{"target": "/srv/checkouts/acme", "user_id": "u_123", "tier": "pro"}
type AnalysisArgs struct {
	// Target is the directory to analyse, on the worker's file system. It is
	// the args' only unique field: with producer.UniqueOpts, two analyses of
	// one target are one job, whoever asked.
	Target string `json:"target" river:"unique"`
	// UserID is the user the analysis is for; kept with the result.
	UserID string `json:"user_id"`
	// Tier is the user's billing tier when the job was enqueued. It picks the
	// class of the chained specview job's queue; an unknown tier is logged and
	// counted and routes to `_default`, as ADR-16 says.
	Tier string `json:"tier"`

	decodeErr error
}

func (AnalysisArgs) Kind() string { return KindAnalysis }

// UnmarshalJSON decodes the args without ever failing; see decodeArgs.
func (a *AnalysisArgs) UnmarshalJSON(data []byte) error {
	type plain AnalysisArgs
	return decodeArgs(data, (*plain)(a), &a.decodeErr)
}

// Validate reports what is wrong with the args, if anything.
func (a *AnalysisArgs) Validate() error {
	if a.decodeErr != nil {
		return a.decodeErr
	}
	if a.Target == "" {
		return errors.New("target is required")
	}
	return nil
}

// AnalysisWorker works analysis jobs.
type AnalysisWorker struct {
	river.WorkerDefaults[AnalysisArgs]

	pool   *pgxpool.Pool
	logger *slog.Logger
	roots  []string
}

var _ river.Worker[AnalysisArgs] = (*AnalysisWorker)(nil)

// NewAnalysisWorker returns a worker writing results through pool. roots
// (ANALYSIS_ROOTS, config.Analysis) are the absolute directories a target
// must be in once its symlinks and `..` are resolved on this host (each
// root resolved too); a job whose target is elsewhere, or relative, is
// cancelled with the target and the roots in its reason. No roots: any
// directory the worker can read (a deployment passes "/" for that, which
// also refuses relative targets).
func NewAnalysisWorker(pool *pgxpool.Pool, logger *slog.Logger, roots ...string) *AnalysisWorker {
	return &AnalysisWorker{pool: pool, logger: logger, roots: roots}
}

const insertAnalysisResult = `
INSERT INTO analysis_results
    (job_id, target, user_id, tier, git_commit, total_tests, go_tests, python_tests, js_tests,
     files_scanned, files_skipped, tests)
VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (job_id) DO NOTHING
RETURNING id`

// Work scans the target, stores the result, chains a specview job in the same
// queue class and completes the job, all in one transaction.
func (w *AnalysisWorker) Work(ctx context.Context, job *river.Job[AnalysisArgs]) error {
	args := job.Args
	if err := args.Validate(); err != nil {
		return cancelBadArgs(KindAnalysis, err)
	}

	// A target outside the roots (scan.ErrOutsideRoots) is an ErrTarget.
	res, err := scan.Dir(ctx, args.Target, scan.Options{Roots: w.roots})
	if errors.Is(err, scan.ErrTarget) || errors.Is(err, scan.ErrTooManyFiles) {
		return river.JobCancel(err)
	}
	if err != nil {
		return fmt.Errorf("scan %q: %w", args.Target, err)
	}

	// The tier the job runs for now (a dedup upgrade rewrites it): its
	// metadata's, else its args' (a producer that records it only there).
	tier, ok := jobmeta.TierOf(job.Metadata, nil)
	tierName := tier.String()
	if !ok {
		tier, tierName = routing.TierOrDefault(ctx, w.logger, args.Tier), args.Tier
	}
	testsJSON, err := json.Marshal(res.Tests)
	if err != nil {
		return fmt.Errorf("encode tests: %w", err)
	}

	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		var resultID int64
		err := tx.QueryRow(ctx, insertAnalysisResult,
			job.ID, args.Target, args.UserID, tierName, res.Commit, res.Total(),
			res.GoTests, res.PythonTests, res.JSTests, res.TestFiles, len(res.Skipped), testsJSON,
		).Scan(&resultID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// An earlier delivery stored the result and chained the spec in
			// the transaction that should also have completed this job.
			w.logger.WarnContext(ctx, "analysis result already stored", slog.Int64("job_id", job.ID))
		case err != nil:
			return fmt.Errorf("store analysis result: %w", err)
		default:
			client := river.ClientFromContext[pgx.Tx](ctx)
			opts := specViewInsertOpts(job.Queue, tier, args.UserID)
			chained, err := client.InsertTx(ctx, tx, SpecViewArgs{AnalysisResultID: resultID, Tier: tierName}, opts)
			if err != nil {
				return fmt.Errorf("chain specview job: %w", err)
			}
			// River's own wake-up is rate-limited per client and queue: a
			// spec chained just after another would wait for a poll.
			if chained.Job.State == rivertype.JobStateAvailable {
				if err := producer.NotifyInsert(ctx, tx, chained.Job.Queue); err != nil {
					return fmt.Errorf("chain specview job: %w", err)
				}
			}
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete job: %w", err)
		}
		return nil
	})
}

// specViewInsertOpts routes the spec of an analysis through routing, to the
// specview queue of the same class as the analysis job's queue (so a scheduled
// or escalated analysis keeps its class), at the tier's starting priority,
// for the same tenant.
func specViewInsertOpts(analysisQueue string, tier tiers.Tier, tenant string) *river.InsertOpts {
	_, class, ok := routing.ClassOf(analysisQueue)
	opts := routing.InsertOptsFor(specViewBaseQueue, tier, tenant, ok && class == routing.Scheduled)
	if ok {
		opts.Queue = routing.QueueName(specViewBaseQueue, class)
		opts.Metadata = routing.InsertMetadata(tier, tenant, opts.Queue, opts.Priority)
	}
	return opts
}
