package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// floorStream measures the floor of insert→start latency on this machine and
// database: the hops every LISTEN/NOTIFY-driven queue pays, without River.
// One job per streamInterval for duration from each of producers
// goroutines (sharing a pool of 4 connections, as the isolation phases'
// producer client does, their starts spread over the first interval): a
// producer inserts a row and notifies in one transaction (River's insert
// does the same: the row, then pg_notify, then commit); a listener
// connection waits for the notifications; a worker connection claims the
// unclaimed rows with one UPDATE per notification (River's fetch is one
// statement too). The latency is attempted_at − created_at by the
// database's clock. created_at is now(), the producer's transaction start,
// as River stamps a job's created_at. attempted_at is clock_timestamp() as
// the UPDATE claims the row, not now() as River's fetch stamps it: now() is
// the claiming statement's start, which can precede a row it claims. A
// producer can begin and commit while that statement waits for its
// snapshot (1.3 ms once in CI, with 16 producers on 2 cores), and the
// sample came out negative. clock_timestamp() runs after the snapshot, so
// after the row's commit. Nothing
// else runs: no debouncing, no cooldown. What tierq's pickup adds to this
// floor is River's and tierq's own cost.
//
// With flush false the producers' transactions commit without waiting for
// the WAL flush (synchronous_commit off on their connections only): the
// same chain without the disk's share, a diagnostic of how much of the
// floor's tail is the disk. Nothing tierq deploys commits that way.
func (e *env) floorStream(ctx context.Context, duration time.Duration, flush bool, producers int) ([]float64, error) {
	channel := "tierq_floor_" + e.Name
	if _, err := e.Pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS floor_job (
			id bigserial PRIMARY KEY,
			created_at timestamptz NOT NULL DEFAULT now(),
			attempted_at timestamptz)`); err != nil {
		return nil, fmt.Errorf("floor table: %w", err)
	}
	if _, err := e.Pool.Exec(ctx, `TRUNCATE floor_job`); err != nil {
		return nil, fmt.Errorf("floor table: %w", err)
	}

	connect := func() (*pgx.Conn, error) {
		conn, err := pgx.ConnectConfig(ctx, e.PoolConfig.ConnConfig.Copy())
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		return conn, nil
	}
	var conns [2]*pgx.Conn
	for i := range conns {
		conn, err := connect()
		if err != nil {
			return nil, err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		conns[i] = conn
	}
	listener, worker := conns[0], conns[1]
	pool, err := e.newPool(ctx, 4, flush)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}

	n := int(duration / streamInterval)
	claimed := make(chan error, 1)
	go func() {
		for range n * producers {
			if _, err := listener.WaitForNotification(ctx); err != nil {
				claimed <- fmt.Errorf("wait for notification: %w", err)
				return
			}
			if _, err := worker.Exec(ctx, `UPDATE floor_job SET attempted_at = clock_timestamp() WHERE attempted_at IS NULL`); err != nil {
				claimed <- fmt.Errorf("claim: %w", err)
				return
			}
		}
		claimed <- nil
	}()

	err = e.paced(ctx, producers, streamInterval, n, func(ctx context.Context, _, _ int) error {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO floor_job DEFAULT VALUES`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, channel)
			return err
		})
		if err != nil {
			return fmt.Errorf("floor insert: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	select {
	case err := <-claimed:
		if err != nil {
			return nil, err
		}
	case <-time.After(10 * time.Second):
		return nil, errors.New("floor: not every row was claimed after 10s")
	}

	rows, err := e.Pool.Query(ctx, `SELECT extract(epoch FROM attempted_at - created_at)::float8 * 1000 FROM floor_job`)
	if err != nil {
		return nil, fmt.Errorf("read floor latencies: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[float64])
}
