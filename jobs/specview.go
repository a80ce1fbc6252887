package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tierq/tierq/jobs/scan"
	"github.com/tierq/tierq/jobs/specdoc"
)

// KindSpecView is the kind of specview jobs.
const KindSpecView = "specview"

// SpecViewArgs are the args of a specview job. JSON:
//
//	{"analysis_result_id": 42, "tier": "pro"}
type SpecViewArgs struct {
	// AnalysisResultID is the analysis_results row to render.
	AnalysisResultID int64 `json:"analysis_result_id" river:"unique"`
	// Tier is carried from the analysis for the record.
	Tier string `json:"tier,omitempty"`

	decodeErr error
}

func (SpecViewArgs) Kind() string { return KindSpecView }

// UnmarshalJSON decodes the args without ever failing; see decodeArgs.
func (a *SpecViewArgs) UnmarshalJSON(data []byte) error {
	type plain SpecViewArgs
	return decodeArgs(data, (*plain)(a), &a.decodeErr)
}

// Validate reports what is wrong with the args, if anything.
func (a *SpecViewArgs) Validate() error {
	if a.decodeErr != nil {
		return a.decodeErr
	}
	if a.AnalysisResultID <= 0 {
		return fmt.Errorf("analysis_result_id must be a positive id, not %d", a.AnalysisResultID)
	}
	return nil
}

// SpecViewWorker works specview jobs.
type SpecViewWorker struct {
	river.WorkerDefaults[SpecViewArgs]

	pool   *pgxpool.Pool
	logger *slog.Logger
}

var _ river.Worker[SpecViewArgs] = (*SpecViewWorker)(nil)

// NewSpecViewWorker returns a worker reading and writing through pool.
func NewSpecViewWorker(pool *pgxpool.Pool, logger *slog.Logger) *SpecViewWorker {
	return &SpecViewWorker{pool: pool, logger: logger}
}

const (
	selectAnalysisResult = `SELECT target, coalesce(git_commit, ''), tests FROM analysis_results WHERE id = $1`

	insertSpecDocument = `
INSERT INTO spec_documents (job_id, analysis_result_id, title, content, test_count)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (job_id) DO NOTHING`
)

// ErrResultMissing is the reason a specview job is cancelled when its analysis
// result does not exist (deleted by retention, or a wrong id).
var ErrResultMissing = errors.New("analysis result not found")

// Work renders the analysis result into spec_documents and completes the job
// in the same transaction.
func (w *SpecViewWorker) Work(ctx context.Context, job *river.Job[SpecViewArgs]) error {
	args := job.Args
	if err := args.Validate(); err != nil {
		return cancelBadArgs(KindSpecView, err)
	}

	var (
		target, commit string
		tests          []scan.Test
	)
	err := w.pool.QueryRow(ctx, selectAnalysisResult, args.AnalysisResultID).Scan(&target, &commit, &tests)
	if errors.Is(err, pgx.ErrNoRows) {
		return river.JobCancel(fmt.Errorf("%w: id %d", ErrResultMissing, args.AnalysisResultID))
	}
	if err != nil {
		return fmt.Errorf("load analysis result %d: %w", args.AnalysisResultID, err)
	}

	doc := specdoc.Render(target, commit, tests)
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertSpecDocument, job.ID, args.AnalysisResultID, doc.Title, doc.Content, len(tests)); err != nil {
			return fmt.Errorf("store spec document: %w", err)
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete job: %w", err)
		}
		return nil
	})
}
