package dlq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobmeta"
)

// TestReplayOfABadTenant: a dead letter whose tenant breaks
// jobmeta.CheckTenant (a row inserted directly) is not replayed by a client
// from producer.ClientConfig, whose insert hook refuses it: its outcome is
// ErrInvalid with the rule's problem, and the other dead letters of the
// request are replayed (docs/jobs.md).
func TestReplayOfABadTenant(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	long := strings.Repeat("t", 3200)
	insert := func(tenant string) {
		testdb.InsertRaw(t, db, testdb.RawJob{State: "discarded", Queue: "analysis_default", Kind: "loadtest",
			Metadata: fmt.Sprintf(`{%q: %q}`, jobmeta.Tenant, tenant)})
	}
	insert("u_1")
	insert(long)
	_, err := dlq.Drain(ctx, db.Pool, 100)
	require.NoError(t, err)
	var good, bad int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM dead_letter_jobs WHERE metadata->>'tierq:tenant' = 'u_1'`).Scan(&good))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM dead_letter_jobs WHERE metadata->>'tierq:tenant' = $1`, long).Scan(&bad))

	out, err := dlq.Replay(ctx, db.Producer(t), db.Pool, testdb.Registry(t).Queues(), []int64{good, bad}, dlq.ReplayOptions{Actor: "alice"})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND metadata->>'tierq:tenant' = 'u_1'`, out[0].JobID))
	require.EqualError(t, out[1].Err, fmt.Sprintf(
		"invalid dead-letter request: dead letter %d cannot be inserted as it is: loadtest job: invalid tenant id: 3200 bytes, longer than 200", bad))
	require.ErrorIs(t, out[1].Err, dlq.ErrInvalid)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job`), "the good one only")
}
