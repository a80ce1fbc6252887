package bench_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/bench"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
)

// TestConsoleTimesEveryPage runs the console scenario at tiny sizes (2,000
// jobs, 300 dead letters, 2 requests a page): every page answered 200 with
// a body, each has a target, and the schema is gone afterwards. It checks
// no speed: that is what tierctl bench console is for.
func TestConsoleTimesEveryPage(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	prefix := schemaPrefix(t)
	registry := testdb.Registry(t)
	analyzer, ok := registry.Lookup(jobs.ServiceAnalyzer)
	require.True(t, ok)
	opts := bench.Tiny(bench.Options{DatabaseURL: testdb.URL(), Service: analyzer, Registry: registry}, prefix)

	var r bench.Report
	require.NoError(t, bench.Run(context.Background(), "console", opts, &r))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix+"_"), "the schema is dropped")

	c := r.Console
	require.NotNil(t, c)
	require.Equal(t, 2_000, c.Jobs)
	require.Equal(t, 400, c.Held)
	require.Equal(t, 21, c.Tenants)
	require.Equal(t, 300, c.DeadLetters)
	require.Equal(t, 150, c.Escalations)
	require.Equal(t, 2, c.Requests)
	var names []string
	for _, p := range c.Pages {
		names = append(names, p.Name)
		require.Positive(t, p.MedianMs, p.Name)
		require.GreaterOrEqual(t, p.MaxMs, p.MedianMs, p.Name)
		require.Zero(t, p.Failures, "%s: %s", p.Name, p.Error)
		require.Greater(t, p.Bytes, 1000, "%s: a page", p.Name)
	}
	require.Equal(t, []string{
		"overview", "queue", "queue_tenant", "queue_small_tenant", "job",
		"dead_letters", "dead_letters_queue", "dead_letters_kind", "dead_letters_tier", "dead_letters_tenant", "dead_letters_small_tenant",
		"dead_letters_error", "dead_letters_rare_error", "dead_letters_pending", "dead_letters_replayed", "dead_letters_all_filters",
		"dead_letter", "bulk_replay_confirm_tenant", "bulk_replay_confirm_big_tenant", "bulk_replay_confirm_all", "escalations", "escalations_actor", "subscriptions", "subscriptions_user",
	}, names)
	var targets []string
	for _, tg := range r.Targets {
		require.Equal(t, "console", tg.Scenario)
		require.Equal(t, "<= 300", tg.Goal)
		targets = append(targets, tg.Name)
	}
	require.Len(t, targets, len(names))
	require.Equal(t, "overview_ms", targets[0])
}
