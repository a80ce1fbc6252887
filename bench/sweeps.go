package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/routing"
)

// SweepsResult is the sweeps scenario: one aging sweep that promotes 500
// jobs (in the default queue of the service under test), one escalation
// sweep that moves 500 (from its scheduled queue), and one dead-letter drain
// batch of 1,000, each timed with 10k and with 1M rows in river_job (mostly
// completed, spread over every service's queues; 1% available and not yet
// due), in one run; medians in ms over repetitions. A ratio near 1 means the
// cost follows the work, not the table.
type SweepsResult struct {
	Small int `json:"small_rows"`
	Large int `json:"large_rows"`

	AgingSmallMs      float64 `json:"aging_small_ms"`
	AgingLargeMs      float64 `json:"aging_large_ms"`
	AgingRatio        float64 `json:"aging_ratio"`
	EscalationSmallMs float64 `json:"escalation_small_ms"`
	EscalationLargeMs float64 `json:"escalation_large_ms"`
	EscalationRatio   float64 `json:"escalation_ratio"`
	DLQSmallMs        float64 `json:"dlq_small_ms"`
	DLQLargeMs        float64 `json:"dlq_large_ms"`
	DLQRatio          float64 `json:"dlq_ratio"`
	Repetitions       int     `json:"repetitions"`
}

// Sizes of one sweep's work.
const (
	sweepDue   = 500
	drainBatch = 1000
	// escalationKind marks the escalation sweep's jobs, so that the reset
	// finds them (no worker runs either kind).
	escalationKind = loadtest.Kind + "_escalation"
)

// Sweeps runs the sweeps scenario.
func Sweeps(ctx context.Context, opts Options) (SweepsResult, error) {
	res := SweepsResult{Small: opts.sizes().sweepSmall, Large: opts.sizes().sweepLarge, Repetitions: opts.sizes().sweepReps}
	opts, err := opts.withDefaults()
	if err != nil {
		return res, err
	}
	for _, total := range []int{res.Small, res.Large} {
		agingMs, escalationMs, dlqMs, err := sweepTimes(ctx, opts, total, res.Repetitions)
		if err != nil {
			return res, err
		}
		if total == res.Small {
			res.AgingSmallMs, res.EscalationSmallMs, res.DLQSmallMs = agingMs, escalationMs, dlqMs
		} else {
			res.AgingLargeMs, res.EscalationLargeMs, res.DLQLargeMs = agingMs, escalationMs, dlqMs
		}
	}
	res.AgingRatio = round(res.AgingLargeMs/res.AgingSmallMs, 3)
	res.EscalationRatio = round(res.EscalationLargeMs/res.EscalationSmallMs, 3)
	res.DLQRatio = round(res.DLQLargeMs/res.DLQSmallMs, 3)
	return res, nil
}

// sweepTimes lays out total rows in a fresh schema and times each sweep reps
// times, returning the medians in ms.
func sweepTimes(ctx context.Context, opts Options, total, reps int) (agingMs, escalationMs, dlqMs float64, err error) {
	e, err := newEnv(ctx, opts)
	if err != nil {
		return 0, 0, 0, err
	}
	defer e.close()

	opts.progress().Stage(fmt.Sprintf("sweeps: laying out %d rows", total), 0)
	queues := opts.Registry.Queues()
	discarded := discardedQueues(opts.Registry)
	freeQueue, scheduledQueue := opts.Service.Queue(routing.Default), opts.Service.Queue(routing.Scheduled)
	waiting := total / 100
	if err := seed.Finished(ctx, e.Pool, queues, total-waiting-2*sweepDue); err != nil {
		return 0, 0, 0, err
	}
	// Aging: 500 due (waited 12 minutes at priority 4), the rest waited a
	// minute. Escalation: 500 background jobs waited 4 hours, at priority
	// 2 so that aging leaves them alone.
	if err := seed.Available(ctx, e.Pool, loadtest.Kind, freeQueue, 4, waiting+sweepDue, time.Minute, sweepDue, 12*time.Minute); err != nil {
		return 0, 0, 0, err
	}
	if err := seed.Available(ctx, e.Pool, escalationKind, scheduledQueue, 2, sweepDue, 4*time.Hour, 0, 0); err != nil {
		return 0, 0, 0, err
	}
	if err := seed.Analyze(ctx, e.Pool); err != nil {
		return 0, 0, 0, err
	}

	agingSettings := aging.Settings{Step: 5 * time.Minute, MaxPriority: 2, Queues: queues, Batch: 1000}
	rules := escalation.Rules(3*time.Hour, 0)
	var ag, es, dl []float64
	opts.progress().Stage(fmt.Sprintf("sweeps: %d rows, %d repetitions", total, reps), reps+1)
	for rep := range reps + 1 { // the first warms the caches and is not counted
		if rep == 1 {
			ag, es, dl = nil, nil, nil
		}
		// Both resets come first: the jobs the escalation sweep moved keep
		// their 4-hour due time, and aging would lift them too.
		if _, err := e.Pool.Exec(ctx, `UPDATE `+riverschema.JobTable+` SET queue = $2, priority = 2, scheduled_at = now() - interval '4 hours',
			metadata = '{}' WHERE state = '`+riverschema.StateAvailable+`' AND kind = $1`, escalationKind, scheduledQueue); err != nil {
			return 0, 0, 0, fmt.Errorf("reset escalation: %w", err)
		}
		if _, err := e.Pool.Exec(ctx, `UPDATE `+riverschema.JobTable+` SET priority = 4, metadata = '{}'
			WHERE state = '`+riverschema.StateAvailable+`' AND queue = $2 AND priority < 4 AND kind = $1`, loadtest.Kind, freeQueue); err != nil {
			return 0, 0, 0, fmt.Errorf("reset aging: %w", err)
		}
		start := time.Now()
		a, err := aging.Sweep(ctx, e.Pool, agingSettings)
		ag = append(ag, ms(time.Since(start)))
		if err != nil || a.Total != sweepDue {
			return 0, 0, 0, fmt.Errorf("aging sweep promoted %d of %d: %v", a.Total, sweepDue, err)
		}

		start = time.Now()
		s, err := escalation.Sweep(ctx, e.Pool, queues, rules, 1000)
		es = append(es, ms(time.Since(start)))
		if err != nil || s.Total != sweepDue {
			return 0, 0, 0, fmt.Errorf("escalation sweep moved %d of %d: %v", s.Total, sweepDue, err)
		}

		if _, err := seed.Discarded(ctx, e.Pool, discarded, drainBatch); err != nil {
			return 0, 0, 0, err
		}
		start = time.Now()
		n, err := dlq.DrainBatch(ctx, e.Pool, drainBatch, map[string]int{})
		dl = append(dl, ms(time.Since(start)))
		if err != nil || n != drainBatch {
			return 0, 0, 0, fmt.Errorf("drain batch moved %d of %d: %v", n, drainBatch, err)
		}
		opts.progress().Add(1)
	}
	return round(median(ag), 2), round(median(es), 2), round(median(dl), 2), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
