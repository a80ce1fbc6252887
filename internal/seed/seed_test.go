package seed_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/loadtest"
)

func TestSeedsFillTheQueuesTheyAreGiven(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()

	require.NoError(t, seed.Finished(ctx, db.Pool, []string{"mail_priority", "mail_default"}, 5))
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'completed' AND queue = 'mail_priority' AND kind = $1`, loadtest.Kind))
	require.Equal(t, 3, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'completed' AND queue = 'mail_default'`))

	ids, err := seed.Discarded(ctx, db.Pool, []seed.Queue{
		{Name: "mail_priority", Kind: "send_mail", Args: `{"to": "u{i}@example.com", "n": {i}}`},
		{Name: "mail_default", Kind: "send_digest", Args: `{}`},
	}, 3)
	require.NoError(t, err)
	require.Len(t, ids, 3)
	jobs := db.Jobs(t, "id = ANY($1)", ids)
	require.Equal(t, []testdb.Job{
		{ID: ids[0], Kind: "send_digest", Queue: "mail_default", State: "discarded", Priority: 2, Attempt: 2},
		{ID: ids[1], Kind: "send_mail", Queue: "mail_priority", State: "discarded", Priority: 3, Attempt: 2},
		{ID: ids[2], Kind: "send_digest", Queue: "mail_default", State: "discarded", Priority: 4, Attempt: 2},
	}, jobs)
	var args string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT args::text FROM river_job WHERE id = $1`, ids[1]).Scan(&args))
	require.JSONEq(t, `{"to": "u2@example.com", "n": 2}`, args)

	require.NoError(t, seed.AvailableArgs(ctx, db.Pool, loadtest.Kind, "mail_default", `{"sleep_ms": 20}`, 3, 4))
	require.Equal(t, 4, db.Count(t, `SELECT count(*) FROM river_job WHERE state = 'available' AND queue = 'mail_default'
		AND kind = $1 AND priority = 3 AND args = '{"sleep_ms": 20}' AND scheduled_at <= now()`, loadtest.Kind))

	_, err = seed.Discarded(ctx, db.Pool, nil, 1)
	require.ErrorContains(t, err, "no queues to seed")
	require.ErrorContains(t, seed.Finished(ctx, db.Pool, nil, 1), "no queues to seed")
}
