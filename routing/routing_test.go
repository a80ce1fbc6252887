package routing_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

type selectQueueCase struct {
	name        string
	base        string
	tier        tiers.Tier
	isScheduled bool
	want        string
}

func TestSelectQueue(t *testing.T) {
	t.Parallel()

	// Every tier x scheduled x two base queues, as ADR-16 lays out.
	adr := map[tiers.Tier]string{
		tiers.Free: "default", tiers.Pro: "priority", tiers.ProPlus: "priority", tiers.Enterprise: "priority",
	}
	var tests []selectQueueCase
	for _, base := range []string{"analysis", "specview"} {
		for _, tier := range tiers.All() {
			tests = append(tests,
				selectQueueCase{name: fmt.Sprintf("%s/%s", base, tier), base: base, tier: tier, want: base + "_" + adr[tier]},
				selectQueueCase{name: fmt.Sprintf("%s/%s/scheduled", base, tier), base: base, tier: tier, isScheduled: true, want: base + "_scheduled"},
			)
		}
	}
	tests = append(tests,
		selectQueueCase{name: "zero value", base: "analysis", tier: 0, want: "analysis_default"},
		selectQueueCase{name: "zero value scheduled", base: "analysis", tier: 0, isScheduled: true, want: "analysis_scheduled"},
		selectQueueCase{name: "unknown", base: "specview", tier: tiers.Tier(42), want: "specview_default"},
		selectQueueCase{name: "unknown scheduled", base: "specview", tier: tiers.Tier(42), isScheduled: true, want: "specview_scheduled"},
		selectQueueCase{name: "other base queue", base: "billing", tier: tiers.Pro, want: "billing_priority"},
	)
	require.Len(t, tests, 2*4*2+5)

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, routing.SelectQueue(tt.base, tt.tier, tt.isScheduled))
		})
	}
}

func TestQueueName(t *testing.T) {
	t.Parallel()

	for _, base := range []string{"analysis", "specview", "mail_out"} {
		var queues []string
		for _, class := range routing.Classes() {
			queues = append(queues, routing.QueueName(base, class))
		}
		require.Equal(t, []string{base + "_priority", base + "_default", base + "_scheduled"}, queues)
		for _, queue := range queues {
			gotBase, class, ok := routing.ClassOf(queue)
			require.True(t, ok)
			require.Equal(t, base, gotBase)
			require.Equal(t, queue, routing.QueueName(base, class))
		}
	}

	_, _, ok := routing.ClassOf("analysis")
	require.False(t, ok)
	_, _, ok = routing.ClassOf("_default")
	require.False(t, ok)

	for _, name := range []string{"priority", "default", "scheduled"} {
		class, err := routing.ParseClass(name)
		require.NoError(t, err)
		require.Equal(t, name, class.String())
	}
	_, err := routing.ParseClass("urgent")
	require.ErrorContains(t, err, `"urgent"`)
}

// TestQueueNamesPassRiverValidation hands every queue name to River's own
// client constructor, which rejects names that break its queue-name rule.
func TestQueueNamesPassRiverValidation(t *testing.T) {
	t.Parallel()

	queues := map[string]river.QueueConfig{}
	for _, base := range []string{"analysis", "specview"} {
		for _, tier := range append(tiers.All(), 0) {
			for _, isScheduled := range []bool{false, true} {
				queues[routing.SelectQueue(base, tier, isScheduled)] = river.QueueConfig{MaxWorkers: 1}
			}
		}
	}
	require.Len(t, queues, 6)

	// pgxpool connects lazily and River's constructor validates without
	// connecting, so this needs no database.
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error { return nil }))
	_, err = river.NewClient(riverpgxv5.New(pool), &river.Config{Queues: queues, Workers: workers})
	require.NoError(t, err)

	// The check is real: River refuses the colon form ADR-16 moved away from.
	_, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{"analysis:priority": {MaxWorkers: 1}},
		Workers: workers,
	})
	require.ErrorContains(t, err, "queue name is invalid")
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

func TestStartingPriority(t *testing.T) {
	t.Parallel()

	require.Equal(t, 2, routing.StartingPriority(tiers.Enterprise))
	require.Equal(t, 3, routing.StartingPriority(tiers.ProPlus))
	require.Equal(t, 4, routing.StartingPriority(tiers.Pro))
	require.Equal(t, 4, routing.StartingPriority(tiers.Free))
	require.Equal(t, 4, routing.StartingPriority(0))

	// Paid tiers are ordered inside the priority queue, and none takes the
	// escalation priority.
	for _, tier := range append(tiers.All(), 0, 42) {
		require.Greater(t, routing.StartingPriority(tier), routing.PriorityEscalated, tier.String())
		require.LessOrEqual(t, routing.StartingPriority(tier), routing.PriorityLowest, tier.String())
	}
	require.Less(t, routing.StartingPriority(tiers.Enterprise), routing.StartingPriority(tiers.ProPlus))
	require.Less(t, routing.StartingPriority(tiers.ProPlus), routing.StartingPriority(tiers.Pro))
}

func TestInsertOpts(t *testing.T) {
	t.Parallel()

	tests := []struct {
		opts         *river.InsertOpts
		wantQueue    string
		wantPriority int
		wantMetadata string
	}{
		{
			routing.InsertOptsFor("analysis", tiers.Enterprise, "", false), "analysis_priority", 2,
			`{"tierq:tier": "enterprise", "tierq:original_queue": "analysis_priority", "tierq:original_priority": 2}`,
		},
		{
			routing.InsertOptsFor("specview", tiers.Free, "", true), "specview_scheduled", 4,
			`{"tierq:tier": "free", "tierq:original_queue": "specview_scheduled", "tierq:original_priority": 4}`,
		},
		{
			routing.InsertOptsFor("specview", tiers.ProPlus, "u_42", false), "specview_priority", 3,
			`{"tierq:tier": "pro_plus", "tierq:tenant": "u_42", "tierq:original_queue": "specview_priority", "tierq:original_priority": 3}`,
		},
		{
			// Any tenant is escaped as JSON here, even one that breaks
			// the rule (the newline): producer.TenantHook refuses it at
			// insert (TestTenantHook).
			routing.InsertOptsFor("analysis", tiers.Pro, "o'brien \"ü\"\n<&>", false), "analysis_priority", 4,
			`{"tierq:tier": "pro", "tierq:tenant": "o'brien \"\u00fc\"\n<&>", "tierq:original_queue": "analysis_priority", "tierq:original_priority": 4}`,
		},
		{
			// An unknown tier routes to _default and records no tier.
			routing.InsertOptsFor("analysis", tiers.Tier(9), "u_1", false), "analysis_default", 4,
			`{"tierq:tenant": "u_1", "tierq:original_queue": "analysis_default", "tierq:original_priority": 4}`,
		},
	}
	for _, tt := range tests {
		require.Equal(t, tt.wantQueue, tt.opts.Queue)
		require.Equal(t, tt.wantPriority, tt.opts.Priority)
		require.JSONEq(t, tt.wantMetadata, string(tt.opts.Metadata))
		require.Zero(t, tt.opts.MaxAttempts)
		require.Empty(t, tt.opts.Tags)
	}
}

// TestUnknownTierCounted is not parallel so that no other test of this package
// moves the process-wide counter while it runs.
func TestUnknownTierCounted(t *testing.T) {
	before := routing.UnknownTierCount()
	for _, tier := range tiers.All() {
		routing.SelectQueue("analysis", tier, false)
		routing.SelectQueue("analysis", tier, true)
	}
	require.Equal(t, before, routing.UnknownTierCount(), "known tiers are not counted")

	routing.SelectQueue("analysis", 0, false)
	routing.SelectQueue("analysis", tiers.Tier(9), true)
	routing.InsertOptsFor("specview", 0, "", false)
	require.Equal(t, before+3, routing.UnknownTierCount())
}

// TestSelectQueueDoesNotAllocate is not parallel: testing.AllocsPerRun
// refuses to run in parallel tests.
func TestSelectQueueDoesNotAllocate(t *testing.T) {
	// The first use of a base queue fills the cache (AllocsPerRun's own
	// warm-up run would too); every use after that does not allocate.
	for _, base := range []string{"analysis", "specview", "custom"} {
		routing.SelectQueue(base, tiers.Pro, false)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		routing.SelectQueue("analysis", tiers.Pro, false)
		routing.SelectQueue("specview", tiers.Free, true)
		routing.SelectQueue("custom", tiers.Enterprise, false)
		routing.SelectQueue("analysis", 0, false)
	})
	require.Zero(t, allocs)
}

func BenchmarkSelectQueue(b *testing.B) {
	tiersToRoute := append(tiers.All(), 0)
	b.ReportAllocs()
	var i int
	for b.Loop() {
		routing.SelectQueue("analysis", tiersToRoute[i%len(tiersToRoute)], i%7 == 0)
		i++
	}
}

// BenchmarkInsertOptsFor is a producer's per-insert routing: queue, starting
// priority and metadata for a tier.
func BenchmarkInsertOptsFor(b *testing.B) {
	all := tiers.All()
	b.ReportAllocs()
	var i int
	for b.Loop() {
		_ = routing.InsertOptsFor("analysis", all[i%len(all)], "", i%7 == 0)
		i++
	}
}
