package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/seed"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
	"github.com/tierq/tierq/worker"
)

// InvoiceArgs are the args of a team's own kind, "invoice_send", of its
// service "invoices" (invoicesRegistry): nothing of the reference app.
type InvoiceArgs struct {
	InvoiceID int64  `json:"invoice_id"`
	Note      string `json:"note,omitempty"`
}

func (InvoiceArgs) Kind() string { return "invoice_send" }

type invoiceWorker struct {
	river.WorkerDefaults[InvoiceArgs]
}

func (*invoiceWorker) Work(context.Context, *river.Job[InvoiceArgs]) error { return nil }

var _ river.Worker[InvoiceArgs] = (*invoiceWorker)(nil)

// invoicesRegistry is the team's registry: service invoices, queues
// invoices_priority, invoices_default and invoices_scheduled.
func invoicesRegistry(*pgxpool.Pool) (*service.Registry, error) {
	invoices, err := service.New(&service.Config{Name: "invoices", Kinds: []service.Kind{service.WorkerKind[InvoiceArgs](&invoiceWorker{})}})
	if err != nil {
		return nil, err
	}
	return service.NewRegistry(invoices)
}

// runUntilRecorded runs a process of the invoices service (run: worker.Run,
// scheduler.Run or api.Run, as the team's main would call it) until it has
// logged started (its start is over) and the invoices service is recorded
// by it (recordedBy), then stops it: what it recorded stays.
func runUntilRecorded(t *testing.T, db *testdb.DB, recordedBy, started string, run func(ctx context.Context, logger *slog.Logger) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &proctest.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, slog.New(slog.NewTextHandler(out, nil))) }()
	proctest.WaitOutput(t, out, started, 30*time.Second)
	testdb.WaitFor(t, 20*time.Second, "the invoices "+recordedBy+" recorded its service", func() bool {
		return db.Count(t, `SELECT count(*) FROM tierq_services WHERE name = 'invoices' AND recorded_by = $1`, recordedBy) == 1
	})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the invoices %s did not stop:\n%s", recordedBy, out)
	}
}

// runInvoicesWorker runs a worker process of the invoices service until it
// has recorded its service (runUntilRecorded).
func runInvoicesWorker(t *testing.T, db *testdb.DB) {
	t.Helper()
	registry, err := invoicesRegistry(nil)
	require.NoError(t, err)
	cfg, err := config.LoadWorker(append(bareEnv(db), "WORKER_SERVICE=invoices"), registry)
	require.NoError(t, err)
	runUntilRecorded(t, db, "worker", `msg="worker started"`, func(ctx context.Context, logger *slog.Logger) error {
		workerConfig, err := cfg.Config(registry, logger)
		if err != nil {
			return err
		}
		workerConfig.NewServices = invoicesRegistry
		return worker.Run(ctx, workerConfig)
	})
}

// TestProcessesRecordTheirServices: a worker, a scheduler and an API
// process of a team's registry (worker.Run, scheduler.Run, api.Run) each
// record its services when it starts, the same row again (first seen
// kept, last seen and the recording process updated), and the stock
// tierctl lists it.
func TestProcessesRecordTheirServices(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	runInvoicesWorker(t, db)
	var firstSeen time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT first_seen_at FROM tierq_services WHERE name = 'invoices'`).Scan(&firstSeen))

	schedulerCfg, err := config.Load[config.Scheduler](bareEnv(db))
	require.NoError(t, err)
	registry, err := invoicesRegistry(nil)
	require.NoError(t, err)
	runUntilRecorded(t, db, "scheduler", `msg="scheduler started"`, func(ctx context.Context, logger *slog.Logger) error {
		schedulerConfig, err := schedulerCfg.Config(registry, logger)
		if err != nil {
			return err
		}
		schedulerConfig.NewServices = invoicesRegistry
		return scheduler.Run(ctx, schedulerConfig)
	})
	apiCfg, err := config.Load[config.API](append(bareEnv(db), "API_ADDR=127.0.0.1:0", "API_TOKEN=producer-token-0123456789", "API_ADMIN_TOKEN=admin-token-0123456789"))
	require.NoError(t, err)
	runUntilRecorded(t, db, "api", `msg="api listening"`, func(ctx context.Context, logger *slog.Logger) error {
		apiConfig, err := apiCfg.Config(registry, logger)
		if err != nil {
			return err
		}
		apiConfig.NewServices = invoicesRegistry
		return api.Run(ctx, apiConfig)
	})

	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM tierq_services`))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM tierq_services WHERE first_seen_at = $1 AND seen_at > first_seen_at`, firstSeen))
	out, err := runTierctl(t, bareEnv(db), "services", "list")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^SERVICE\s+QUEUES\s+KINDS\s+SOURCE\s+RECORDED BY\s+FIRST SEEN\s+LAST SEEN\n`+
		`invoices\s+invoices_priority invoices_default invoices_scheduled\s+invoice_send\s+database\s+api\s+\S+ \S+\s+\S+ \S+\n$`, out)
}

// TestStockTierctlServesRecordedServices: with only a team's service
// recorded in the database (by its worker process), the stock tierctl,
// which links none of the team's code, lists it, escalates a job in its
// default queue, replays a dead letter into its priority queue, watches its
// queues alone (no reference app's rows) and enqueues its kind, checking
// the args' keys against the recorded fields. Forgotten, it is unknown.
func TestStockTierctlServesRecordedServices(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	env := append(bareEnv(db), "USER=alice")

	out, err := runTierctl(t, env, "services", "list")
	require.NoError(t, err, out)
	require.Equal(t, "no service is recorded in this database (a worker, scheduler or API process records its services when it starts)\n", out)
	_, err = runTierctl(t, env, "escalate", "1", "--to", "priority", "--actor", "alice", "--reason", "nothing known")
	require.ErrorIs(t, err, errNoServices)

	runInvoicesWorker(t, db)

	out, err = runTierctl(t, env, "services", "list", "--json")
	require.NoError(t, err, out)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, "invoices", listed[0]["name"])
	require.Equal(t, "invoices", listed[0]["base_queue"])
	require.Equal(t, []any{"invoices_priority", "invoices_default", "invoices_scheduled"}, listed[0]["queues"])
	require.Equal(t, []any{map[string]any{"name": "invoice_send", "aliases": []any{}, "fields": []any{"invoice_id", "note"}}}, listed[0]["kinds"])
	require.Equal(t, "worker", listed[0]["recorded_by"])
	require.Equal(t, "database", listed[0]["source"])

	t.Run("Escalate", func(t *testing.T) {
		registry, err := invoicesRegistry(nil)
		require.NoError(t, err)
		invoices, _ := registry.Lookup("invoices")
		res, err := db.Producer(t).Insert(ctx, InvoiceArgs{InvoiceID: 100}, invoices.InsertOpts(tiers.Free, "", false))
		require.NoError(t, err)
		id := fmt.Sprint(res.Job.ID)

		out, err := runTierctl(t, env, "escalate", id, "--to", "priority", "--actor", "alice", "--reason", "customer call")
		require.NoError(t, err, out)
		require.Equal(t, "job "+id+" (invoice_send, available): invoices_default priority 4 -> invoices_priority priority 1\n", out)
		require.Equal(t, "invoices_priority", db.Jobs(t, "id = $1", res.Job.ID)[0].Queue)
	})

	t.Run("ReplayToQueue", func(t *testing.T) {
		_, err := seed.Discarded(ctx, db.Pool, []seed.Queue{{Name: "invoices_default", Kind: "invoice_send", Args: `{"invoice_id": {i}}`}}, 1)
		require.NoError(t, err)
		out, err := runTierctl(t, env, "dlq", "drain")
		require.NoError(t, err, out)
		var deadID int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM dead_letter_jobs WHERE queue = 'invoices_default'`).Scan(&deadID))

		out, err = runTierctl(t, env, "dlq", "replay", itoa(deadID), "--to-queue", "invoices_priority")
		require.NoError(t, err, out)
		require.Regexp(t, `^dead letter \d+: replayed as job \d+ in invoices_priority\n`, out)
		require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE queue = 'invoices_priority' AND kind = 'invoice_send' AND args = '{"invoice_id": 1}'`))

		_, err = runTierctl(t, env, "dlq", "replay", itoa(deadID), "--force", "--to-queue", "analysis_priority")
		require.Equal(t, 2, ExitCode(err))
		require.ErrorContains(t, err, `queue "analysis_priority" is not a service queue (invoices_priority, invoices_default, invoices_scheduled)`)
	})

	t.Run("Watch", func(t *testing.T) {
		out, err := runTierctl(t, env, "watch", "--once")
		require.NoError(t, err, out)
		require.Regexp(t, `(?m)^  invoices_priority\s`, out)
		require.Regexp(t, `(?m)^  invoices_default\s`, out)
		require.Regexp(t, `(?m)^  invoices_scheduled\s`, out)
		require.NotContains(t, out, "analysis_")
		require.NotContains(t, out, "specview_")
	})

	t.Run("Enqueue", func(t *testing.T) {
		out, err := runTierctl(t, env, "enqueue", "--kind", "invoice_send", "--args", `{"invoice_id": 42, "note": "net 30"}`, "--mix", "pro=1", "--user-prefix", "acme")
		require.NoError(t, err, out)
		require.Equal(t, "enqueued 1 invoice_send jobs:\n  invoices_priority    1\n", out)
		var got struct {
			Priority           int
			Args, Tenant, Tier string
		}
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT priority, args::text, metadata->>'tierq:tenant', metadata->>'tierq:tier'
			FROM river_job WHERE kind = 'invoice_send' AND args->>'note' = 'net 30'`).Scan(&got.Priority, &got.Args, &got.Tenant, &got.Tier))
		require.Equal(t, struct {
			Priority           int
			Args, Tenant, Tier string
		}{4, `{"note": "net 30", "invoice_id": 42}`, "acme_pro_0", "pro"}, got)

		usage := []struct {
			name string
			give []string
			want string
		}{
			{"UnknownField", []string{"--kind", "invoice_send", "--args", `{"invoice": 42}`}, `--args of kind invoice_send: unknown field "invoice" (its fields are invoice_id, note)`},
			{"NotAnObject", []string{"--kind", "invoice_send", "--args", `[42]`}, "--args of kind invoice_send must be a JSON object"},
			{"UnknownKind", []string{"--kind", "analysis"}, `--kind "analysis" is not a kind of a service known in this database (invoice_send)`},
			{"ArgsWithoutKind", []string{"--args", `{}`}, "--args is for --kind"},
		}
		for _, tt := range usage {
			t.Run(tt.name, func(t *testing.T) {
				_, err := runTierctl(t, env, append([]string{"enqueue"}, tt.give...)...)
				require.Equal(t, 2, ExitCode(err), "%v", err)
				require.EqualError(t, err, tt.want)
			})
		}
	})

	t.Run("Forget", func(t *testing.T) {
		out, err := runTierctl(t, env, "services", "forget", "invoices")
		require.NoError(t, err, out)
		require.Equal(t, "service invoices forgotten: its queues, jobs and dead letters are left as they are\n", out)
		_, err = runTierctl(t, env, "services", "forget", "invoices")
		require.ErrorIs(t, err, errUnknownService)
		require.Equal(t, 1, ExitCode(err))
		_, err = runTierctl(t, env, "dlq", "replay", "1", "--to-queue", "invoices_priority")
		require.Equal(t, 2, ExitCode(err))
		require.ErrorIs(t, err, errNoServices)
	})
}

// TestEmbeddedCommandUsesItsRegistry: tierctl's commands built into a
// team's binary with its registry (Command, Config.Registry) know its
// service without any record in the database, decode enqueue's args with
// the kind's args type, and list the registry's services before the
// recorded ones; a recorded service that shares a queue with the
// registry's is left out.
func TestEmbeddedCommandUsesItsRegistry(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	registry, err := invoicesRegistry(nil)
	require.NoError(t, err)
	invoices, _ := registry.Lookup("invoices")
	embedded := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		cmd := Command(Config{Registry: registry, Environ: bareEnv(db), Stdout: &out})
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}

	res, err := db.Producer(t).Insert(ctx, InvoiceArgs{InvoiceID: 7}, invoices.InsertOpts(tiers.Free, "", false))
	require.NoError(t, err)
	out, err := embedded(t, "escalate", fmt.Sprint(res.Job.ID), "--to", "priority", "--actor", "bob", "--reason", "late")
	require.NoError(t, err, out)
	require.Contains(t, out, "invoices_default priority 4 -> invoices_priority priority 1")

	out, err = embedded(t, "enqueue", "--kind", "invoice_send", "--args", `{"invoice_id": 8}`)
	require.NoError(t, err, out)
	require.Equal(t, "enqueued 1 invoice_send jobs:\n  invoices_default     1\n", out)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'invoice_send' AND args = '{"invoice_id": 8}'`))
	_, err = embedded(t, "enqueue", "--kind", "invoice_send", "--args", `{"invoice_id": "eight"}`)
	require.Equal(t, 2, ExitCode(err))
	require.ErrorContains(t, err, "--args of kind invoice_send: json: cannot unmarshal")

	out, err = embedded(t, "watch", "--once")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^  invoices_default\s`, out)
	require.NotContains(t, out, "analysis_")

	// A record of another service on the registry's queues (a renamed
	// service, say) is left out; the reference app's, recorded, is added.
	require.NoError(t, testdb.Registry(t).Record(ctx, db.Pool, "worker"))
	_, err = db.Pool.Exec(ctx, `INSERT INTO tierq_services (name, base_queue, queues, kinds, recorded_by)
		VALUES ('billing', 'invoices', '{invoices_priority,invoices_default,invoices_scheduled}', '[]', 'worker')`)
	require.NoError(t, err)
	out, err = embedded(t, "services", "list", "--json")
	require.NoError(t, err, out)
	var listed []struct {
		Name, Source, Shadowed string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Equal(t, []struct{ Name, Source, Shadowed string }{
		{"invoices", "registry", ""},
		{"analyzer", "database", ""},
		{"specgen", "database", ""},
		{"billing", "database", "shares base queue invoices with service invoices"},
	}, listed)
}

// TestExitCode: usage and configuration errors exit 2, others 1.
func TestExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give error
		want int
	}{
		{"Nil", nil, 0},
		{"Usage", &UsageError{errors.New("bad flag")}, 2},
		{"Config", fmt.Errorf("load: %w", config.ErrInvalid), 2},
		{"UnknownCommand", errors.New(`unknown command "frobnicate" for "tierctl"`), 2},
		{"Other", errUnknownService, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, ExitCode(tt.give))
		})
	}
}
