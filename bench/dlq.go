package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/producer"
)

// DLQResult is the dlq scenario: discarded jobs (next to as many completed
// ones, both spread over every service's queues) moved into
// dead_letter_jobs by the scheduler's drain with its default batch, then all
// of them replayed as new River jobs with tierctl's default batch. Medians
// over runs.
type DLQResult struct {
	Rows           int     `json:"rows"`
	DrainBatch     int     `json:"drain_batch"`
	DrainRowsPerS  float64 `json:"drain_rows_per_s"`
	ReplayBatch    int     `json:"replay_batch"`
	ReplayRowsPerS float64 `json:"replay_rows_per_s"`
	DrainSeconds   float64 `json:"drain_seconds"`
	ReplaySeconds  float64 `json:"replay_seconds"`
	Runs           int     `json:"runs"`
}

// Defaults the scenario measures: the scheduler's DLQ_DRAIN_BATCH and
// tierctl dlq replay's --batch.
const (
	dlqDrainBatch  = 1000
	dlqReplayBatch = 2000
)

// DLQ runs the dlq scenario.
func DLQ(ctx context.Context, opts Options) (DLQResult, error) {
	res := DLQResult{Rows: opts.sizes().dlqRows, DrainBatch: dlqDrainBatch, ReplayBatch: dlqReplayBatch, Runs: opts.runs()}
	opts, err := opts.withDefaults()
	if err != nil {
		return res, err
	}
	queues, discarded := opts.Registry.Queues(), discardedQueues(opts.Registry)
	e, err := newEnv(ctx, opts)
	if err != nil {
		return res, err
	}
	defer e.close()
	client, err := river.NewClient(riverpgxv5.New(e.Pool), producer.ClientConfig(e.Name, opts.logger()))
	if err != nil {
		return res, fmt.Errorf("new river client: %w", err)
	}

	var drains, replays, drainS, replayS []float64
	for run := range res.Runs {
		opts.progress().Stage(fmt.Sprintf("dlq run %d/%d: seeding %d discarded and %d completed jobs", run+1, res.Runs, res.Rows, res.Rows), 0)
		if err := e.reset(ctx); err != nil {
			return res, err
		}
		if err := seed.Finished(ctx, e.Pool, queues, res.Rows); err != nil {
			return res, err
		}
		if _, err := seed.Discarded(ctx, e.Pool, discarded, res.Rows); err != nil {
			return res, err
		}
		if err := seed.Analyze(ctx, e.Pool); err != nil {
			return res, err
		}

		opts.progress().Stage(fmt.Sprintf("dlq run %d/%d: drain", run+1, res.Runs), 0)
		start := time.Now()
		d, err := dlq.Drain(ctx, e.Pool, dlqDrainBatch)
		elapsed := time.Since(start).Seconds()
		if err != nil || d.Moved != res.Rows {
			return res, fmt.Errorf("drain moved %d of %d: %v", d.Moved, res.Rows, err)
		}
		drains, drainS = append(drains, float64(res.Rows)/elapsed), append(drainS, elapsed)

		if _, err := e.Pool.Exec(ctx, `VACUUM ANALYZE dead_letter_jobs`); err != nil {
			return res, fmt.Errorf("vacuum: %w", err)
		}
		opts.progress().Stage(fmt.Sprintf("dlq run %d/%d: replay", run+1, res.Runs), res.Rows)
		start = time.Now()
		r, err := dlq.ReplayAll(ctx, client, e.Pool, queues, dlq.Filter{}, dlq.ReplayOptions{Actor: "bench"}, dlqReplayBatch, opts.progress().Add)
		elapsed = time.Since(start).Seconds()
		if err != nil || r.Replayed != res.Rows {
			return res, fmt.Errorf("replay replayed %d of %d: %v", r.Replayed, res.Rows, err)
		}
		replays, replayS = append(replays, float64(res.Rows)/elapsed), append(replayS, elapsed)
	}
	res.DrainRowsPerS, res.ReplayRowsPerS = round(median(drains), 0), round(median(replays), 0)
	res.DrainSeconds, res.ReplaySeconds = round(median(drainS), 2), round(median(replayS), 2)
	return res, nil
}
