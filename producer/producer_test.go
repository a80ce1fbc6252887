package producer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/fairshare"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/tiers"
)

func TestDuplicateOfHigherTierUpgradesTheQueuedJob(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	client := db.Producer(t)

	insert := func(tier tiers.Tier, scheduled bool, target string) producer.Inserted {
		t.Helper()
		var out producer.Inserted
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			out, err = producer.Insert(ctx, client, tx, producer.Job{
				Args:    jobs.AnalysisArgs{Target: target, UserID: "u_" + tier.String(), Tier: tier.String()},
				Service: testdb.Service(t, "analyzer"), Tier: tier, Scheduled: scheduled,
			})
			return err
		}))
		return out
	}

	free := insert(tiers.Free, false, "/srv/repo")
	require.False(t, free.Duplicate)
	require.Equal(t, "analysis_default", free.Job.Queue)
	require.Equal(t, 4, free.Job.Priority)

	ent := insert(tiers.Enterprise, false, "/srv/repo")
	require.True(t, ent.Duplicate)
	require.True(t, ent.Upgraded)
	require.Equal(t, free.Job.ID, ent.Job.ID, "one job, not two")
	require.Equal(t, "analysis_priority", ent.Job.Queue)
	require.Equal(t, 2, ent.Job.Priority)
	require.Equal(t, "analysis_default", ent.FromQueue)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND args->>'tier' = 'enterprise'`, ent.Job.ID),
		"the args carry the tier the job now runs for, so its chained specview job is routed for it")

	all := db.Jobs(t, "kind = 'analysis'")
	require.Equal(t, []testdb.Job{{ID: free.Job.ID, Kind: "analysis", Queue: "analysis_priority", State: "available", Priority: 2}}, all)
	var actor, reason, from, to string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT actor, reason, from_queue, to_queue FROM job_escalations WHERE job_id = $1`, free.Job.ID).
		Scan(&actor, &reason, &from, &to))
	require.Equal(t, "dedup", actor)
	require.Equal(t, "duplicate inserted for tier enterprise", reason)
	require.Equal(t, []string{"analysis_default", "analysis_priority"}, []string{from, to})

	// Worse placements never downgrade it: free, pro_plus (priority 3 in
	// the same queue), an enterprise scheduled job.
	for _, dup := range []producer.Inserted{
		insert(tiers.Free, false, "/srv/repo"),
		insert(tiers.ProPlus, false, "/srv/repo"),
		insert(tiers.Enterprise, true, "/srv/repo"),
	} {
		require.True(t, dup.Duplicate)
		require.False(t, dup.Upgraded)
		require.Equal(t, "analysis_priority", dup.Job.Queue)
		require.Equal(t, 2, dup.Job.Priority)
	}
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM job_escalations`))

	// A scheduled duplicate moves up to the priority queue on a paid insert.
	sched := insert(tiers.Free, true, "/srv/other")
	require.Equal(t, "analysis_scheduled", sched.Job.Queue)
	pro := insert(tiers.Pro, false, "/srv/other")
	require.True(t, pro.Upgraded)
	require.Equal(t, "analysis_priority", pro.Job.Queue)
	require.Equal(t, 4, pro.Job.Priority)

	// Once the job is finished, the same target is a new job.
	_, err := db.Pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now(), attempt = 1, attempted_at = now() WHERE id = $1`, free.Job.ID)
	require.NoError(t, err)
	again := insert(tiers.Free, false, "/srv/repo")
	require.False(t, again.Duplicate)
	require.NotEqual(t, free.Job.ID, again.Job.ID)
}

func TestDuplicateOfRunningJobIsReturnedUnchanged(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	client := db.Producer(t)

	insert := func(tier tiers.Tier) producer.Inserted {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		out, err := producer.Insert(ctx, client, tx, producer.Job{
			Args: jobs.AnalysisArgs{Target: "/srv/busy"}, Service: testdb.Service(t, "analyzer"), Tier: tier,
		})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		return out
	}
	first := insert(tiers.Free)
	_, err := db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, first.Job.ID)
	require.NoError(t, err)

	dup := insert(tiers.Enterprise)
	require.True(t, dup.Duplicate)
	require.False(t, dup.Upgraded, "a running job is past the point where its queue matters")
	require.Equal(t, "analysis_default", db.Jobs(t, "id = $1", first.Job.ID)[0].Queue)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM job_escalations`))
}

// TestDuplicateOfAHeldJob: a job fair share holds in a flooding tenant's
// line, asked for again by another tenant. The same tier gets it as it is:
// held, in the flood's line. A better tier moves it to that tier's queue,
// still held, in the asking tenant's line, where a pass admits it at once.
func TestDuplicateOfAHeldJob(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	client := db.Producer(t)
	analyzer := testdb.Service(t, "analyzer")
	insert := func(tier tiers.Tier, tenant, target string) producer.Inserted {
		t.Helper()
		var out producer.Inserted
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			out, err = producer.Insert(ctx, client, tx, producer.Job{
				Args:    jobs.AnalysisArgs{Target: target, UserID: tenant},
				Service: analyzer, Tier: tier, Tenant: tenant,
			})
			return err
		}))
		return out
	}
	for i := range 10 {
		insert(tiers.Free, "flood", fmt.Sprintf("/srv/flood/%d", i))
	}
	insert(tiers.Free, "steady", "/srv/steady") // a tenant alone is never held back
	admitter, err := fairshare.New(db.Pool, &fairshare.Config{Queues: map[string]fairshare.Queue{
		"analysis_default": {Workers: 3, Fair: true}, "analysis_priority": {Workers: 5, Fair: true},
	}})
	require.NoError(t, err)
	p, err := admitter.Pass(ctx, "analysis_default")
	require.NoError(t, err)
	require.Equal(t, 8, p.Held, "the flood's last eight (2 to 9) held: its window is 2 (3 default workers, two tenants)")

	same := insert(tiers.Free, "other", "/srv/flood/9")
	require.True(t, same.Duplicate)
	require.False(t, same.Upgraded)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'target' = '/srv/flood/9'
		AND state = 'pending' AND metadata->>'tierq:tenant' = 'flood'`), "held, in the flood's line")

	paid := insert(tiers.Pro, "payer", "/srv/flood/9")
	require.True(t, paid.Upgraded)
	require.Equal(t, "analysis_priority", paid.Job.Queue)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1
		AND state = 'pending' AND metadata ? 'tierq:held_at' AND metadata->>'tierq:tenant' = 'payer'`, paid.Job.ID))
	p, err = admitter.Pass(ctx, "analysis_priority")
	require.NoError(t, err)
	require.Equal(t, 1, p.Admitted)
	require.Equal(t, "available", db.Jobs(t, "id = $1", paid.Job.ID)[0].State)
}

// TestEveryInsertNotifies: River's insert notification is rate-limited per
// client and queue and sends nothing later for an insert it silenced;
// Insert notifies every job it inserts available, once per transaction. The
// client here limits to one notification an hour, so River's own goes out
// for the first insert only.
func TestEveryInsertNotifies(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := producer.ClientConfig(db.Schema, nil)
	cfg.FetchCooldown, cfg.FetchPollInterval = time.Hour, time.Hour
	client, err := river.NewClient(riverpgxv5.New(db.Pool), cfg)
	require.NoError(t, err)
	analyzer := testdb.Service(t, "analyzer")

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN `+pgx.Identifier{db.Schema + ".river_insert"}.Sanitize())
	require.NoError(t, err)

	insert := func(tier tiers.Tier, target string, scheduled bool) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := producer.Insert(ctx, client, tx, producer.Job{
				Args: jobs.AnalysisArgs{Target: target}, Service: analyzer, Tier: tier, Scheduled: scheduled,
			})
			return err
		}))
	}
	insert(tiers.Enterprise, "/srv/a", false) // River's and Insert's: delivered once
	insert(tiers.Enterprise, "/srv/b", false) // River silent, Insert's
	insert(tiers.Free, "/srv/c", false)
	insert(tiers.Enterprise, "/srv/cron", true) // the scheduled queue's first: River's and Insert's
	insert(tiers.Enterprise, "/srv/b", false)   // a duplicate, not moved: nothing new
	// A marker sent last: every notification before it has been delivered.
	_, err = db.Pool.Exec(ctx, `SELECT pg_notify(current_schema() || '.river_insert', 'end')`)
	require.NoError(t, err)

	var got []string
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		require.NoError(t, err)
		if n.Payload == "end" {
			break
		}
		got = append(got, n.Payload)
	}
	require.Equal(t, []string{
		`{"queue": "analysis_priority"}`,
		`{"queue": "analysis_priority"}`,
		`{"queue": "analysis_default"}`,
		`{"queue": "analysis_scheduled"}`,
	}, got)
}
