package waitstats

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tierq/tierq/internal/db"
)

// Defaults of Config.
const (
	DefaultFlushInterval = 10 * time.Second
	DefaultRetention     = 2 * time.Hour
)

// Config configures a Recorder. The zero value is the defaults.
type Config struct {
	// FlushInterval is how often the Recorder adds what it observed to
	// job_wait_stats. Default: DefaultFlushInterval (10s).
	FlushInterval time.Duration
	// Retention is how long rows are kept: every flush deletes the older
	// ones, and what a flush could not write is dropped once it is older.
	// At least an hour (the console reads 60 minutes). Default:
	// DefaultRetention (2h).
	Retention time.Duration
	// Logger logs the flushes that fail. Default: slog.Default().
	Logger *slog.Logger
}

// WithDefaults is c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks c (with its defaults), changing nothing.
func (c Config) Validate() error {
	if c.FlushInterval < 0 {
		return fmt.Errorf("waitstats: flush interval %s must be positive", c.FlushInterval)
	}
	if c.Retention != 0 && c.Retention < time.Hour {
		return fmt.Errorf("waitstats: retention %s must be at least an hour", c.Retention)
	}
	return nil
}

// key is one row of job_wait_stats.
type key struct {
	minute      time.Time // UTC, truncated to the minute
	queue, tier string
}

// Recorder adds the waits a process observes to job_wait_stats: Observe
// counts in memory, Flush (every FlushInterval in Run) adds the counts to
// the table. Safe for concurrent use.
type Recorder struct {
	q       db.Querier
	cfg     Config
	nowFunc func() time.Time

	mu      sync.Mutex
	pending map[key]*Histogram
}

// NewRecorder is a Recorder that writes through q, configured by cfg (nil:
// the defaults).
func NewRecorder(q db.Querier, cfg *Config) (*Recorder, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Recorder{q: q, cfg: c.WithDefaults(), nowFunc: time.Now, pending: map[key]*Histogram{}}, nil
}

// ObserveWait counts one job of queue and tier (a tier's name, or
// "unknown") that started now after waiting wait from its due time
// (metrics.WaitObserver).
func (r *Recorder) ObserveWait(queue, tier string, wait time.Duration) {
	k := key{minute: r.nowFunc().UTC().Truncate(time.Minute), queue: queue, tier: tier}
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.pending[k]
	if h == nil {
		h = &Histogram{}
		r.pending[k] = h
	}
	h[Bucket(wait)]++
}

// flushSQL adds a batch to job_wait_stats and deletes the rows older than
// the retention ($6), in one statement. The batch is three parallel arrays
// of keys ($1 minutes, $2 queues, $3 tiers) and their counts flattened into
// one array ($4, $5 counts a key): Postgres has no arrays of arrays of
// different keys. A key already there gets the batch's counts added
// element by element, so replicas sum. Keys come sorted, so that replicas
// flushing the same minutes lock the rows in the same order. Both the
// upsert and the delete go through the primary key (minute, queue, tier).
const flushSQL = `
WITH purged AS (
    DELETE FROM job_wait_stats WHERE minute < $6
)
INSERT INTO job_wait_stats AS s (minute, queue, tier, counts)
SELECT u.minute, u.queue, u.tier, ($4::bigint[])[(u.i - 1) * $5 + 1 : u.i * $5]
FROM unnest($1::timestamptz[], $2::text[], $3::text[]) WITH ORDINALITY AS u(minute, queue, tier, i)
WHERE u.minute >= $6
ON CONFLICT (minute, queue, tier) DO UPDATE
SET counts = ARRAY(SELECT c.a + c.b FROM unnest(s.counts, excluded.counts) WITH ORDINALITY AS c(a, b, n) ORDER BY c.n)`

// Flush adds what the Recorder observed since its last flush to
// job_wait_stats, and deletes the rows older than Retention. When the
// write fails, the counts are kept for the next flush (those older than
// Retention dropped).
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	batch := r.pending
	r.pending = map[key]*Histogram{}
	r.mu.Unlock()

	cutoff := r.nowFunc().UTC().Truncate(time.Minute).Add(-r.cfg.Retention)
	keys := make([]key, 0, len(batch))
	for k := range batch {
		if !k.minute.Before(cutoff) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(a.minute.Compare(b.minute), cmp.Compare(a.queue, b.queue), cmp.Compare(a.tier, b.tier))
	})
	minutes := make([]time.Time, len(keys))
	queues := make([]string, len(keys))
	tierNames := make([]string, len(keys))
	counts := make([]int64, 0, len(keys)*NumBuckets)
	for i, k := range keys {
		minutes[i], queues[i], tierNames[i] = k.minute, k.queue, k.tier
		counts = append(counts, batch[k][:]...)
	}
	if _, err := r.q.Exec(ctx, flushSQL, minutes, queues, tierNames, counts, NumBuckets, cutoff); err != nil {
		r.mu.Lock()
		for _, k := range keys {
			if h := r.pending[k]; h != nil {
				h.Add(batch[k])
			} else {
				r.pending[k] = batch[k]
			}
		}
		r.mu.Unlock()
		return fmt.Errorf("flush job waits: %w", err)
	}
	return nil
}

// Run flushes every FlushInterval until ctx ends, then flushes once more
// (for up to 5 s) so that a stopping process's last waits are kept.
// Failed flushes are logged; their counts wait for the next one.
func (r *Recorder) Run(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.FlushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := r.Flush(stopCtx); err != nil {
				r.cfg.Logger.WarnContext(stopCtx, "waitstats: last flush", slog.String("error", err.Error()))
			}
			return
		case <-ticker.C:
			if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.ErrorContext(ctx, "waitstats: flush", slog.String("error", err.Error()))
			}
		}
	}
}
