package limits_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/tiers"
)

// capBundle is a schema where service mailer (queues mailer_priority,
// mailer_default, mailer_scheduled) caps free tenants at 1 running job,
// pro_plus tenants at 3 and enterprise tenants at 1,000; pro tenants are
// not capped.
type capBundle struct {
	db *testdb.DB
}

func setupCaps(t *testing.T) *capBundle { return setupCapsB(t) }

func setupCapsB(t testing.TB) *capBundle {
	return setupMailer(t, limits.Tiers{tiers.Free: {MaxRunning: 1}, tiers.ProPlus: {MaxRunning: 3}, tiers.Enterprise: {MaxRunning: 1000}})
}

// setupMailer is a schema with service mailer (queues mailer_priority,
// mailer_default, mailer_scheduled), live workers of every kind in each of
// its queues (an available job counts against a limit only where one
// fetches it), and tierLimits recorded as the scheduler records them.
func setupMailer(t testing.TB, tierLimits limits.Tiers) *capBundle {
	t.Helper()
	db := testdb.NewCore(t)
	_, err := db.Pool.Exec(context.Background(), `
		INSERT INTO tierq_services (name, base_queue, queues, kinds, recorded_by)
		VALUES ('mailer', 'mailer', '{mailer_priority,mailer_default,mailer_scheduled}', '[]', 'test');
		INSERT INTO fair_share_slots (client_id, queue, slots, heartbeat_at, expires_at)
		SELECT 'w', q, 2, now(), now() + interval '1 hour' FROM unnest('{mailer_priority,mailer_default,mailer_scheduled}'::text[]) AS q`)
	require.NoError(t, err)
	require.NoError(t, limits.Record(context.Background(), db.Pool, limits.Config{Services: map[string]limits.Tiers{"mailer": tierLimits}},
		[]string{"mailer"}, "scheduler"))
	return &capBundle{db: db}
}

// insert inserts n available jobs of tenant and tier into queue, in one
// statement, and returns their ids.
func (b *capBundle) insert(t *testing.T, q pgxQuerier, queue, tier, tenant string, n int) []int64 {
	t.Helper()
	rows, err := q.Query(t.Context(), `
		INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
		SELECT 'mail', '{}', $1, 2, 'available', 25,
		       jsonb_strip_nulls(jsonb_build_object('tierq:tier', $2::text, 'tierq:tenant', nullif($3::text, '')))
		FROM generate_series(1, $4)
		RETURNING id`, queue, tier, tenant, n)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

type pgxQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// states counts tenant's jobs of service mailer by state; held by the cap
// counts "cap_held" besides "pending".
func (b *capBundle) states(t *testing.T, tenant string) map[string]int {
	return b.heldStates(t, tenant, "tierq:cap_held_at", "cap_held")
}

// heldStates counts tenant's jobs of service mailer by state, and as name
// (when any) the held ones whose metadata has mark.
func (b *capBundle) heldStates(t *testing.T, tenant, mark, name string) map[string]int {
	t.Helper()
	rows, err := b.db.Pool.Query(t.Context(), `
		SELECT state::text, count(*), count(*) FILTER (WHERE metadata ? $2 AND metadata ? 'tierq:held_at')
		FROM river_job WHERE coalesce(metadata->>'tierq:tenant', '') = $1 AND queue LIKE 'mailer_%'
		GROUP BY 1`, tenant, mark)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			state   string
			n, held int
		)
		require.NoError(t, rows.Scan(&state, &n, &held))
		out[state] = n
		if held > 0 {
			out[name] = held
		}
	}
	require.NoError(t, rows.Err())
	return out
}

func (b *capBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.db.Pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

// TestCapTrigger is the database's side of concurrency caps (migration
// 00013): a job becoming available beyond its tenant's cap lands held.
func TestCapTrigger(t *testing.T) {
	t.Parallel()

	t.Run("ACapOfOneHolds", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		// One statement of three jobs, then two statements of one.
		b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 3)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 1)
		b.insert(t, b.db.Pool, "mailer_priority", "free", "u1", 1)
		require.Equal(t, map[string]int{"available": 1, "pending": 4, "cap_held": 4}, b.states(t, "u1"))
		// The job let through is marked as counted.
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'available' AND metadata->>'tierq:capped' = 'mailer'`))

		// Another free tenant has its own cap.
		b.insert(t, b.db.Pool, "mailer_default", "free", "u2", 2)
		require.Equal(t, map[string]int{"available": 1, "pending": 1, "cap_held": 1}, b.states(t, "u2"))
	})

	t.Run("UncappedJobsAreLeftAlone", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		b.insert(t, b.db.Pool, "mailer_priority", "pro", "u_pro", 5)
		b.insert(t, b.db.Pool, "mailer_default", "free", "", 5)            // no tenant: no per-tenant limit
		b.insert(t, b.db.Pool, "other_default", "free", "u_other", 5)      // a queue of no service
		b.insert(t, b.db.Pool, "mailer_default", "not_a_tier", "u_bad", 2) // reads as free: capped
		require.Equal(t, map[string]int{"available": 5}, b.states(t, "u_pro"))
		require.Equal(t, map[string]int{"available": 5}, b.states(t, ""))
		require.Equal(t, 5, b.db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'other_default' AND state = 'available'`))
		require.Equal(t, map[string]int{"available": 1, "pending": 1, "cap_held": 1}, b.states(t, "u_bad"))
		require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata ? 'tierq:capped' AND metadata->>'tierq:tenant' <> 'u_bad'`))
	})

	t.Run("AJobOfAKindNoWorkerFetchesDoesNotCount", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		// mailer_default's workers fetch kind mail only: u1's job of
		// another kind would never start, and holds nothing back.
		b.exec(t, `UPDATE fair_share_slots SET kinds = '{mail}' WHERE queue = 'mailer_default'`)
		b.exec(t, `INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
			VALUES ('unknown_kind', '{}', 'mailer_default', 2, 'available', 25, '{"tierq:tier": "free", "tierq:tenant": "u1"}')`)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 2)
		require.Equal(t, map[string]int{"available": 2, "pending": 1, "cap_held": 1}, b.states(t, "u1"))

		// No live worker serves mailer_scheduled at all (a restart, a
		// scale to zero): u2's job there counts, since it starts when
		// workers come (the cap errs on the safe side).
		b.exec(t, `UPDATE fair_share_slots SET expires_at = now() - interval '1 second' WHERE queue = 'mailer_scheduled'`)
		b.insert(t, b.db.Pool, "mailer_scheduled", "free", "u2", 1)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u2", 1)
		require.Equal(t, map[string]int{"available": 1, "pending": 1, "cap_held": 1}, b.states(t, "u2"))
	})

	t.Run("ARefusedAdmissionKeepsItsPlace", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		ids := b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 3)
		var before string
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT scheduled_at::text || ' ' || (metadata->>'tierq:held_at') FROM river_job WHERE id = $1`, ids[1]).Scan(&before))
		// An admission at the cap, as a pass's: the job is held again with
		// its scheduled_at and its hold's start as they were.
		b.exec(t, `UPDATE river_job SET state = 'available', scheduled_at = now() + interval '1 second',
			metadata = metadata - 'tierq:held_at' - 'tierq:cap_held_at' WHERE id = $1`, ids[1])
		var after string
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT scheduled_at::text || ' ' || (metadata->>'tierq:held_at') FROM river_job WHERE id = $1 AND state = 'pending'`, ids[1]).Scan(&after))
		require.Equal(t, before, after)
	})

	t.Run("OverrideBeatsTierDefault", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		two, zero, one := 2, 0, 1
		_, err := limits.SetOverride(t.Context(), b.db.Pool, "mailer", "u_two", limits.Override{MaxRunning: &two})
		require.NoError(t, err)
		_, err = limits.SetOverride(t.Context(), b.db.Pool, "mailer", "u_none", limits.Override{MaxRunning: &zero})
		require.NoError(t, err)
		_, err = limits.SetOverride(t.Context(), b.db.Pool, "mailer", "u_ent", limits.Override{MaxRunning: &one})
		require.NoError(t, err)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u_two", 5)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u_none", 5)
		b.insert(t, b.db.Pool, "mailer_priority", "enterprise", "u_ent", 5)
		require.Equal(t, map[string]int{"available": 2, "pending": 3, "cap_held": 3}, b.states(t, "u_two"))
		require.Equal(t, map[string]int{"available": 5}, b.states(t, "u_none"))
		require.Equal(t, map[string]int{"available": 1, "pending": 4, "cap_held": 4}, b.states(t, "u_ent"))
		// The tier's own default applies when the override does not set a cap.
		b.insert(t, b.db.Pool, "mailer_priority", "pro_plus", "u_pp", 5)
		require.Equal(t, map[string]int{"available": 3, "pending": 2, "cap_held": 2}, b.states(t, "u_pp"))
	})

	t.Run("ACapSpansTheServicesQueuesAndCountsRunningJobs", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		ids := b.insert(t, b.db.Pool, "mailer_priority", "pro_plus", "u1", 3)
		b.exec(t, `UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1 WHERE id = ANY($1)`, ids[:2])
		b.insert(t, b.db.Pool, "mailer_default", "pro_plus", "u1", 1)
		b.insert(t, b.db.Pool, "mailer_scheduled", "pro_plus", "u1", 1)
		require.Equal(t, map[string]int{"running": 2, "available": 1, "pending": 2, "cap_held": 2}, b.states(t, "u1"))

		// A finished job stops counting.
		b.exec(t, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, ids[0])
		b.insert(t, b.db.Pool, "mailer_default", "pro_plus", "u1", 2)
		require.Equal(t, map[string]int{"running": 1, "available": 2, "completed": 1, "pending": 3, "cap_held": 3}, b.states(t, "u1"))

		// A job the pass's process finished and River has not written
		// yet (tierq.finished_jobs) does not count in that transaction.
		err := pgx.BeginFunc(t.Context(), b.db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), `SELECT set_config('tierq.finished_jobs', $1, true)`, fmt.Sprint(ids[1])); err != nil {
				return err
			}
			b.insert(t, tx, "mailer_default", "pro_plus", "u1", 2)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, map[string]int{"running": 1, "available": 3, "completed": 1, "pending": 4, "cap_held": 4}, b.states(t, "u1"))
	})

	t.Run("JobsMadeAvailableLaterLandHeld", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 1)
		// A retry River's scheduler promotes, a snooze River's completer
		// writes, and River UI's retry of a discarded job, while u1 is at
		// its cap.
		ids := b.insert(t, b.db.Pool, "mailer_default", "free", "u1", 3)
		b.exec(t, `UPDATE river_job SET state = 'retryable', metadata = metadata - 'tierq:held_at' - 'tierq:cap_held_at' WHERE id = $1`, ids[0])
		b.exec(t, `UPDATE river_job SET state = 'running', attempted_at = now(), metadata = metadata - 'tierq:held_at' - 'tierq:cap_held_at' WHERE id = $1`, ids[1])
		b.exec(t, `UPDATE river_job SET state = 'discarded', finalized_at = now(), metadata = metadata - 'tierq:held_at' - 'tierq:cap_held_at' WHERE id = $1`, ids[2])
		// (ids[1] running beside the available job: the state a cap
		// set after both started leaves; it counts from now on.)
		b.exec(t, `UPDATE river_job SET state = 'available' WHERE id = $1`, ids[0])
		b.exec(t, `UPDATE river_job SET state = 'available', scheduled_at = now() + interval '3 seconds' WHERE id = $1`, ids[1])
		client := b.db.Producer(t)
		_, err := client.JobRetry(t.Context(), ids[2])
		require.NoError(t, err)
		require.Equal(t, map[string]int{"available": 1, "pending": 3, "cap_held": 3}, b.states(t, "u1"))
	})

	t.Run("RacingTransactionsNeverExceedTheCap", func(t *testing.T) {
		t.Parallel()
		b := setupCaps(t)
		// 6 transactions insert a job of u_race (cap 3) each, all open at
		// once before any commits (the pool has 8 connections), and 20
		// more one job each as fast as they can, without waiting for each
		// other.
		var (
			wg       sync.WaitGroup
			inserted sync.WaitGroup
			commit   = make(chan struct{})
		)
		inserted.Add(6)
		for range 6 {
			wg.Go(func() {
				err := pgx.BeginFunc(context.Background(), b.db.Pool, func(tx pgx.Tx) error {
					_, err := tx.Exec(context.Background(), `
						INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
						VALUES ('mail', '{}', 'mailer_default', 2, 'available', 25, '{"tierq:tier": "pro_plus", "tierq:tenant": "u_race"}')`)
					inserted.Done()
					<-commit
					return err
				})
				if err != nil {
					t.Errorf("insert: %v", err)
				}
			})
		}
		inserted.Wait()
		close(commit)
		wg.Wait()
		st := b.states(t, "u_race")
		require.Equal(t, 6, st["available"]+st["pending"])
		require.Equal(t, 1, st["available"], "the transaction that took the tenant's lock first; the others could not take it")

		for range 20 {
			wg.Go(func() {
				_, err := b.db.Pool.Exec(context.Background(), `
					INSERT INTO river_job (kind, args, queue, priority, state, max_attempts, metadata)
					VALUES ('mail', '{}', 'mailer_priority', 2, 'available', 25, '{"tierq:tier": "pro_plus", "tierq:tenant": "u_race"}')`)
				if err != nil {
					t.Errorf("insert: %v", err)
				}
			})
		}
		wg.Wait()
		st = b.states(t, "u_race")
		require.Equal(t, 26, st["available"]+st["pending"])
		require.LessOrEqual(t, st["available"], 3)
		require.GreaterOrEqual(t, st["available"], 2, "the first of the 20 found room")
	})
}
