package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/sync/errgroup"

	"github.com/tierq/tierq/loadtest"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// InsertResult is the insert scenario: jobs/s a producer inserts one by one
// and in batches (InsertMany) with the queue and priority from the routing
// helper (the InsertOpts of the service under test, from the tier), against
// raw River inserts of the same queues and priorities written out literally,
// on the same client, alternating; and producer.Insert (routing plus dedup
// by unique args, one transaction each, of Options.ProducerArgs).
// Medians over runs. SelectQueue's cost is measured in-process with
// testing.Benchmark.
type InsertResult struct {
	OneByOne        int     `json:"one_by_one_jobs"`
	Batched         int     `json:"batched_jobs"`
	BatchSize       int     `json:"batch_size"`
	RawOnePerS      float64 `json:"raw_one_per_s"`
	RoutedOnePerS   float64 `json:"routed_one_per_s"`
	OneRatio        float64 `json:"one_ratio"`
	ProducerOnePerS float64 `json:"producer_one_per_s"`
	ProducerRatio   float64 `json:"producer_ratio"`
	RawBatchPerS    float64 `json:"raw_batch_per_s"`
	RoutedBatchPerS float64 `json:"routed_batch_per_s"`
	BatchRatio      float64 `json:"batch_ratio"`
	// RiverDefaultsOnePerS is raw one-by-one inserts on a client with
	// River's default configuration (insert notifications at most every
	// 100ms per queue, not producer.NotifyCooldown).
	RiverDefaultsOnePerS float64 `json:"river_defaults_one_per_s"`
	// Concurrent* are raw inserts from 16 goroutines at once, on
	// producer.ClientConfig and on River's defaults: what the 1ms insert
	// notification cooldown costs when many producers commit at once
	// (PostgreSQL serialises the commits of transactions that NOTIFY).
	ConcurrentPerS              float64 `json:"concurrent_per_s"`
	RiverDefaultsConcurrentPerS float64 `json:"river_defaults_concurrent_per_s"`
	ConcurrentRatio             float64 `json:"concurrent_ratio"`
	SelectQueueNs               float64 `json:"select_queue_ns"`
	SelectQueueAllocs           int64   `json:"select_queue_allocs"`
	Runs                        int     `json:"runs"`
}

// Insert runs the insert scenario.
func Insert(ctx context.Context, opts Options) (InsertResult, error) {
	res := InsertResult{OneByOne: opts.sizes().insertOne, Batched: opts.sizes().insertBatched, BatchSize: 1000, Runs: opts.runs()}
	opts, err := opts.withDefaults()
	if err != nil {
		return res, err
	}
	if opts.ProducerArgs == nil {
		return res, errors.New("bench: the insert scenario needs Options.ProducerArgs")
	}
	svc := opts.Service
	e, err := newEnv(ctx, opts)
	if err != nil {
		return res, err
	}
	defer e.close()
	client, err := river.NewClient(riverpgxv5.New(e.Pool), producer.ClientConfig(e.Name, opts.logger()))
	if err != nil {
		return res, fmt.Errorf("new river client: %w", err)
	}
	defaults, err := river.NewClient(riverpgxv5.New(e.Pool), &river.Config{Schema: e.Name, Logger: opts.logger()})
	if err != nil {
		return res, fmt.Errorf("new river client: %w", err)
	}

	// The raw variants insert the same queues and priorities as the routed
	// ones, in the same order, written out literally (built once, here):
	// the difference is the routing helper, not the mix of queues.
	allTiers := tiers.All() // free, pro, pro_plus, enterprise
	free, paid := svc.Queue(routing.Default), svc.Queue(routing.Priority)
	literal := []*river.InsertOpts{
		{Queue: free, Priority: 4}, {Queue: paid, Priority: 4},
		{Queue: paid, Priority: 3}, {Queue: paid, Priority: 2},
	}
	for k, tier := range allTiers {
		routed := svc.InsertOpts(tier, "", false)
		if routed.Queue != literal[k].Queue || routed.Priority != literal[k].Priority {
			return res, fmt.Errorf("insert: literal options for %s (%s, %d) differ from routing's (%s, %d)",
				tier, literal[k].Queue, literal[k].Priority, routed.Queue, routed.Priority)
		}
	}
	raw := func(i int) *river.InsertOpts { return literal[i%len(literal)] }
	concurrent := func(c *river.Client[pgx.Tx], n int) error {
		const producers = 16
		g, gctx := errgroup.WithContext(ctx)
		for p := range producers {
			g.Go(func() error {
				for i := p; i < n; i += producers {
					if _, err := c.Insert(gctx, loadtest.Args{}, raw(i)); err != nil {
						return err
					}
					opts.progress().Add(1)
				}
				return nil
			})
		}
		return g.Wait()
	}
	variants := []struct {
		name string
		n    int
		run  func(run int) error
	}{
		{"raw one", res.OneByOne, func(int) error {
			for i := range res.OneByOne {
				if _, err := client.Insert(ctx, loadtest.Args{}, raw(i)); err != nil {
					return err
				}
				opts.progress().Add(1)
			}
			return nil
		}},
		{"routed one", res.OneByOne, func(int) error {
			for i := range res.OneByOne {
				if _, err := client.Insert(ctx, loadtest.Args{}, svc.InsertOpts(allTiers[i%len(allTiers)], "", false)); err != nil {
					return err
				}
				opts.progress().Add(1)
			}
			return nil
		}},
		{"producer one", res.OneByOne, func(run int) error {
			for i := range res.OneByOne {
				tier := allTiers[i%len(allTiers)]
				err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
					_, err := producer.Insert(ctx, client, tx, producer.Job{Args: opts.ProducerArgs(run, i), Service: svc, Tier: tier})
					return err
				})
				if err != nil {
					return err
				}
				opts.progress().Add(1)
			}
			return nil
		}},
		{"river defaults one", res.OneByOne, func(int) error {
			for i := range res.OneByOne {
				if _, err := defaults.Insert(ctx, loadtest.Args{}, raw(i)); err != nil {
					return err
				}
				opts.progress().Add(1)
			}
			return nil
		}},
		{"raw batch", res.Batched, func(int) error {
			return insertBatches(ctx, client, res.Batched, res.BatchSize, opts, raw)
		}},
		{"concurrent", 2 * res.OneByOne, func(int) error { return concurrent(client, 2*res.OneByOne) }},
		{"river defaults concurrent", 2 * res.OneByOne, func(int) error { return concurrent(defaults, 2*res.OneByOne) }},
		{"routed batch", res.Batched, func(int) error {
			return insertBatches(ctx, client, res.Batched, res.BatchSize, opts, func(i int) *river.InsertOpts {
				return svc.InsertOpts(allTiers[i%len(allTiers)], "", false)
			})
		}},
	}
	rates := map[string][]float64{}
	for run := range res.Runs {
		for k := range variants {
			v := variants[(k+run)%len(variants)] // rotate the order each run
			if err := e.reset(ctx); err != nil {
				return res, err
			}
			opts.progress().Stage(fmt.Sprintf("insert run %d/%d: %s", run+1, res.Runs, v.name), v.n)
			start := time.Now()
			if err := v.run(run); err != nil {
				return res, fmt.Errorf("insert %s: %w", v.name, err)
			}
			rates[v.name] = append(rates[v.name], float64(v.n)/time.Since(start).Seconds())
		}
	}
	m := func(name string) float64 { return median(rates[name]) }
	res.RawOnePerS, res.RoutedOnePerS, res.ProducerOnePerS = round(m("raw one"), 0), round(m("routed one"), 0), round(m("producer one"), 0)
	res.RiverDefaultsOnePerS = round(m("river defaults one"), 0)
	res.RawBatchPerS, res.RoutedBatchPerS = round(m("raw batch"), 0), round(m("routed batch"), 0)
	res.OneRatio = round(m("routed one")/m("raw one"), 3)
	res.ProducerRatio = round(m("producer one")/m("raw one"), 3)
	res.BatchRatio = round(m("routed batch")/m("raw batch"), 3)
	res.ConcurrentPerS, res.RiverDefaultsConcurrentPerS = round(m("concurrent"), 0), round(m("river defaults concurrent"), 0)
	res.ConcurrentRatio = round(m("concurrent")/m("river defaults concurrent"), 3)

	base := svc.BaseQueue()
	bench := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			_ = routing.SelectQueue(base, allTiers[i%len(allTiers)], i%7 == 0)
		}
	})
	if bench.N > 0 {
		res.SelectQueueNs = round(float64(bench.T.Nanoseconds())/float64(bench.N), 2)
	}
	res.SelectQueueAllocs = bench.AllocsPerOp()
	return res, nil
}

// insertBatches inserts n load-test jobs with InsertMany, size per call,
// each with opts(i).
func insertBatches(ctx context.Context, client *river.Client[pgx.Tx], n, size int, o Options, opts func(i int) *river.InsertOpts) error {
	for i := 0; i < n; i += size {
		params := make([]river.InsertManyParams, 0, size)
		for j := i; j < min(i+size, n); j++ {
			params = append(params, river.InsertManyParams{Args: loadtest.Args{}, InsertOpts: opts(j)})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return err
		}
		o.progress().Add(len(params))
	}
	return nil
}
