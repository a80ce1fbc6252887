package jobmeta_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// metadataOf reads a job's metadata as a map, with the moves' times taken
// out (checked separately: each is within a minute of now).
func metadataOf(t *testing.T, db *testdb.DB, id int64) map[string]any {
	t.Helper()
	var raw []byte
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT metadata FROM river_job WHERE id = $1`, id).Scan(&raw))
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	if moves, ok := m["tierq:moves"].([]any); ok {
		for _, mv := range moves {
			obj, ok := mv.(map[string]any)
			if !ok {
				continue
			}
			if at, ok := obj["at"].(string); ok {
				parsed, err := time.Parse(time.RFC3339Nano, at)
				require.NoError(t, err, "move time %q", at)
				require.WithinDuration(t, time.Now(), parsed, time.Minute)
				delete(obj, "at")
			}
		}
	}
	return m
}

// toJSON is v as JSON, for require.JSONEq against a literal.
func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestJobExplainsItself follows one job through every move tierq makes and
// reads its metadata, as River UI shows it, after each: the tier and tenant
// the producer recorded, where it was first inserted, and one entry per move
// (aging, escalation, dedup upgrade, replay).
func TestJobExplainsItself(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()
	client := db.Producer(t)

	args := jobs.AnalysisArgs{Target: "/srv/checkouts/acme", UserID: "u_7", Tier: "free"}
	insert := func(tier tiers.Tier) producer.Inserted {
		var res producer.Inserted
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			args.Tier = tier.String()
			res, err = producer.Insert(ctx, client, tx, producer.Job{
				Args: args, Service: testdb.Service(t, "analyzer"), Tier: tier, Tenant: "u_7",
			})
			return err
		}))
		return res
	}
	id := insert(tiers.Free).Job.ID
	require.JSONEq(t, `{"tierq:tier": "free", "tierq:tenant": "u_7",
		"tierq:original_queue": "analysis_default", "tierq:original_priority": 4}`, toJSON(t, metadataOf(t, db, id)))

	// Aging: 90 s of wait at a 1 m step lifts it one level.
	_, err := db.Pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() - interval '90 seconds' WHERE id = $1`, id)
	require.NoError(t, err)
	res, err := aging.Sweep(ctx, db.Pool, aging.Settings{Step: time.Minute, MaxPriority: 2, Queues: []string{"analysis_default"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Total)
	require.JSONEq(t, `{"tierq:tier": "free", "tierq:tenant": "u_7",
		"tierq:original_queue": "analysis_default", "tierq:original_priority": 4,
		"tierq:base_priority": 4,
		"tierq:moves": [
			{"kind": "aging", "from_queue": "analysis_default", "to_queue": "analysis_default", "from_priority": 4, "to_priority": 3}
		]}`, toJSON(t, metadataOf(t, db, id)))

	// Escalation: more than a minute in the default queue.
	moved, err := escalation.Sweep(ctx, db.Pool, serviceQueues, escalation.Rules(0, time.Minute), 100)
	require.NoError(t, err)
	require.Equal(t, 1, moved.Total)
	meta := metadataOf(t, db, id)
	require.IsType(t, float64(0), meta["tierq:due_at"])
	require.IsType(t, float64(0), meta["tierq:moved_at"])
	delete(meta, "tierq:due_at")
	delete(meta, "tierq:moved_at")
	require.JSONEq(t, `{"tierq:tier": "free", "tierq:tenant": "u_7",
		"tierq:original_queue": "analysis_default", "tierq:original_priority": 4,
		"tierq:base_priority": 4,
		"tierq:moves": [
			{"kind": "aging", "from_queue": "analysis_default", "to_queue": "analysis_default", "from_priority": 4, "to_priority": 3},
			{"kind": "escalation", "from_queue": "analysis_default", "to_queue": "analysis_priority", "from_priority": 3, "to_priority": 4,
			 "actor": "scheduler", "reason": "waited more than 1m0s in a default queue"}
		]}`, toJSON(t, meta))

	// Dedup upgrade: the same analysis asked for by an enterprise user.
	dup := insert(tiers.Enterprise)
	require.True(t, dup.Upgraded)
	require.Equal(t, id, dup.Job.ID)
	meta = metadataOf(t, db, id)
	delete(meta, "tierq:due_at")
	delete(meta, "tierq:moved_at")
	require.JSONEq(t, `{"tierq:tier": "enterprise", "tierq:tenant": "u_7",
		"tierq:original_queue": "analysis_default", "tierq:original_priority": 4,
		"tierq:base_priority": 2,
		"tierq:moves": [
			{"kind": "aging", "from_queue": "analysis_default", "to_queue": "analysis_default", "from_priority": 4, "to_priority": 3},
			{"kind": "escalation", "from_queue": "analysis_default", "to_queue": "analysis_priority", "from_priority": 3, "to_priority": 4,
			 "actor": "scheduler", "reason": "waited more than 1m0s in a default queue"},
			{"kind": "dedup", "from_queue": "analysis_priority", "to_queue": "analysis_priority", "from_priority": 4, "to_priority": 2,
			 "actor": "dedup", "reason": "duplicate inserted for tier enterprise"}
		]}`, toJSON(t, meta))

	// Replay: the job is discarded, drained and replayed.
	_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now(), attempt = 1 WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = dlq.Drain(ctx, db.Pool, 100)
	require.NoError(t, err)
	var deadLetterID int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM dead_letter_jobs WHERE job_id = $1`, id).Scan(&deadLetterID))
	out, err := dlq.Replay(ctx, client, db.Pool, serviceQueues, []int64{deadLetterID}, dlq.ReplayOptions{Actor: "alice"})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	replayed := out[0].JobID
	require.JSONEq(t, `{"tierq:tier": "enterprise", "tierq:tenant": "u_7",
		"tierq:original_queue": "analysis_default", "tierq:original_priority": 4,
		"tierq:base_priority": 2,
		"tierq:replay_of": `+toJSON(t, deadLetterID)+`, "tierq:replay_of_job_id": `+toJSON(t, id)+`,
		"tierq:moves": [
			{"kind": "aging", "from_queue": "analysis_default", "to_queue": "analysis_default", "from_priority": 4, "to_priority": 3},
			{"kind": "escalation", "from_queue": "analysis_default", "to_queue": "analysis_priority", "from_priority": 3, "to_priority": 4,
			 "actor": "scheduler", "reason": "waited more than 1m0s in a default queue"},
			{"kind": "dedup", "from_queue": "analysis_priority", "to_queue": "analysis_priority", "from_priority": 4, "to_priority": 2,
			 "actor": "dedup", "reason": "duplicate inserted for tier enterprise"},
			{"kind": "replay", "from_queue": "analysis_priority", "to_queue": "analysis_priority", "from_priority": 2, "to_priority": 2,
			 "dead_letter_id": `+toJSON(t, deadLetterID)+`, "from_job_id": `+toJSON(t, id)+`, "actor": "alice"}
		]}`, toJSON(t, metadataOf(t, db, replayed)))
}

// TestMovesKeepTheLastTen: a job that already has ten moves keeps the last
// ten after one more; a moves value that is not an array is replaced.
func TestMovesKeepTheLastTen(t *testing.T) {
	t.Parallel()
	serviceQueues := testdb.Registry(t).Queues()
	db := testdb.New(t)
	ctx := context.Background()

	full := testdb.InsertRaw(t, db, testdb.RawJob{
		Queue: "analysis_default", Kind: "analysis", Args: `{}`,
		Metadata: `{"team": "payments", "tierq:moves": [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}, {"n": 5},
			{"n": 6}, {"n": 7}, {"n": 8}, {"n": 9}, {"n": 10}]}`,
	})
	notArray := testdb.InsertRaw(t, db, testdb.RawJob{
		Queue: "analysis_default", Kind: "analysis", Args: `{}`, Metadata: `{"tierq:moves": "oops"}`,
	})
	for _, id := range []int64{full, notArray} {
		_, err := escalation.Escalate(ctx, db.Pool, serviceQueues, escalation.Request{
			JobID: id, To: routing.Priority, Actor: "alice", Reason: "customer call",
		})
		require.NoError(t, err)
	}
	move := `{"kind": "escalation", "from_queue": "analysis_default", "to_queue": "analysis_priority",
		"from_priority": 4, "to_priority": 1, "actor": "alice", "reason": "customer call"}`
	require.JSONEq(t, `{"team": "payments", "tierq:base_priority": 1, "tierq:moves": [{"n": 2}, {"n": 3}, {"n": 4}, {"n": 5},
		{"n": 6}, {"n": 7}, {"n": 8}, {"n": 9}, {"n": 10}, `+move+`]}`, toJSON(t, metadataOf(t, db, full)))
	require.JSONEq(t, `{"tierq:base_priority": 1, "tierq:moves": [`+move+`]}`, toJSON(t, metadataOf(t, db, notArray)))
}

// TestLegacyKeysStillCount: a job moved by an earlier tierq carries its
// bookkeeping under the "tierq_" keys. Aging reads them (its base priority,
// and the due time an escalation kept) and renames them.
func TestLegacyKeysStillCount(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	// Escalated 10 s ago after waiting 3 minutes: due 190 s ago. At a 1 m
	// step it ages from base 4 by 3 levels, to the cap of 2.
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
		INSERT INTO river_job (state, queue, priority, kind, args, metadata, max_attempts, scheduled_at)
		SELECT 'available', 'analysis_priority', 4, 'analysis', '{}',
		       jsonb_build_object('tierq_base_priority', 4, 'team', 'payments',
		           'tierq_due_at', (extract(epoch FROM s - interval '180 seconds') * 1000000)::bigint,
		           'tierq_moved_at', (extract(epoch FROM s) * 1000000)::bigint),
		       5, s
		FROM (SELECT date_trunc('milliseconds', now() - interval '10 seconds') AS s) AS t
		RETURNING id`).Scan(&id))

	res, err := aging.Sweep(ctx, db.Pool, aging.Settings{Step: time.Minute, MaxPriority: 2, Queues: []string{"analysis_priority"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Total)
	require.Equal(t, 2, db.Jobs(t, "id = $1", id)[0].Priority)

	meta := metadataOf(t, db, id)
	require.IsType(t, float64(0), meta["tierq:due_at"], "renamed")
	require.IsType(t, float64(0), meta["tierq:moved_at"], "renamed")
	require.InDelta(t, 180e6, meta["tierq:moved_at"].(float64)-meta["tierq:due_at"].(float64), 1) //nolint:forcetypeassert // checked above
	delete(meta, "tierq:due_at")
	delete(meta, "tierq:moved_at")
	require.JSONEq(t, `{"team": "payments", "tierq:base_priority": 4, "tierq:moves": [
		{"kind": "aging", "from_queue": "analysis_priority", "to_queue": "analysis_priority", "from_priority": 4, "to_priority": 2}
	]}`, toJSON(t, meta))
}
