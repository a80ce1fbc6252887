package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/service"
)

// TestRun runs the API through Run, as a team's main would.
func TestRun(t *testing.T) {
	t.Parallel()

	// apiConfig is the configuration cmd/api loads, translated for Run
	// (config.API.Config), serving the registry newServices builds on
	// Run's pool (and described by it without a pool, else by the
	// invoices' services) and logging to out.
	apiConfig := func(t *testing.T, db *testdb.DB, out io.Writer, newServices func(*pgxpool.Pool) (*service.Registry, error), attrs ...slog.Attr) api.Config {
		t.Helper()
		cfg, err := config.Load[config.API]([]string{
			"DATABASE_URL=" + db.URL, "DATABASE_SCHEMA=" + db.Schema, "API_ADDR=127.0.0.1:0",
			"API_TOKEN=" + producerToken, "API_ADMIN_TOKEN=" + adminToken,
		})
		require.NoError(t, err)
		described, err := newServices(nil)
		if err != nil {
			described, err = invoiceServices(nil)
		}
		require.NoError(t, err)
		apiConfig, err := cfg.Config(described, slog.New(slog.NewTextHandler(out, nil)))
		require.NoError(t, err)
		apiConfig.NewServices, apiConfig.LogAttrs = newServices, attrs
		return apiConfig
	}

	// The reference app's services joined with a team's (example_test.go):
	// the API accepts the kinds of both, logs attrs between its address
	// and River UI's path, and returns nil once its context ends.
	t.Run("reference and team services", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)

		newServices := func(pool *pgxpool.Pool) (*service.Registry, error) {
			ref, err := jobs.Registry(jobs.Deps{Pool: pool})
			if err != nil {
				return nil, err
			}
			own, err := invoiceServices(pool)
			if err != nil {
				return nil, err
			}
			return ref.Join(own)
		}
		out := &proctest.Buffer{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- api.Run(ctx, apiConfig(t, db, out, newServices, slog.String("team", "billing")))
		}()

		proctest.WaitOutput(t, out, "api listening", 20*time.Second)
		listening := regexp.MustCompile(`msg="api listening" addr=(127\.0\.0\.1:\d+) team=billing river_ui=/riverui/\n`).FindStringSubmatch(out.String())
		require.Len(t, listening, 2, out.String())
		b := &bundle{db: db, url: "http://" + listening[1]}

		require.Equal(t, http.StatusOK, b.do(t, "GET", "/healthz", "", nil).status)
		res := b.do(t, "POST", "/v1/jobs", producerToken, `{"kind":"render_invoice","user_id":"u_1","args":{"invoice_id":7}}`)
		require.Equal(t, http.StatusCreated, res.status, string(res.body))
		require.Equal(t, "invoicer_default", res.json(t)["queue"])
		res = b.do(t, "POST", "/v1/jobs", producerToken, `{"kind":"render_invoice","user_id":"u_1","args":{"invoice_id":0}}`)
		require.Equal(t, http.StatusBadRequest, res.status)
		require.Contains(t, res.json(t)["error"], "invoice_id must be positive")
		res = b.do(t, "POST", "/v1/jobs", producerToken, analysisBody("u_1", "/srv/a"))
		require.Equal(t, http.StatusCreated, res.status, string(res.body))
		require.Equal(t, "analysis_default", res.json(t)["queue"])

		proctest.WaitReturn(t, cancel, done, out)
		require.Contains(t, out.String(), "api stopped")
	})

	// A Config.RiverUI that is set is the one Run serves, behind the admin
	// token.
	t.Run("its own River UI", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)

		out := &proctest.Buffer{}
		cfg := apiConfig(t, db, out, invoiceServices)
		cfg.RiverUI = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("the team's UI")) })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- api.Run(ctx, cfg) }()

		proctest.WaitOutput(t, out, "api listening", 20*time.Second)
		listening := regexp.MustCompile(`msg="api listening" addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(out.String())
		require.Len(t, listening, 2, out.String())
		b := &bundle{db: db, url: "http://" + listening[1]}
		res := b.do(t, "GET", "/riverui/", adminToken, "")
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		require.Equal(t, "the team's UI", string(res.body))
		require.Equal(t, http.StatusForbidden, b.do(t, "GET", "/riverui/", producerToken, "").status, "the producer token is not the admin token")

		proctest.WaitReturn(t, cancel, done, out)
	})

	// A registry that cannot be built is Run's error; nothing listens.
	t.Run("services error", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)

		out := &proctest.Buffer{}
		err := api.Run(context.Background(), apiConfig(t, db, out,
			func(*pgxpool.Pool) (*service.Registry, error) { return nil, errors.New("no registry") }))
		require.EqualError(t, err, "api: services: no registry")
		require.NotContains(t, out.String(), "api listening")
	})

	// NewServices must build Registry's services; nothing listens.
	t.Run("services not the Registry's", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)

		out := &proctest.Buffer{}
		cfg := apiConfig(t, db, out, func(pool *pgxpool.Pool) (*service.Registry, error) { return jobs.Registry(jobs.Deps{Pool: pool}) })
		cfg.Registry, _ = invoiceServices(nil)
		err := api.Run(context.Background(), cfg)
		require.EqualError(t, err, "api: Config.NewServices built services analyzer, specgen, Config.Registry has invoicer: they must be the same services")
		require.NotContains(t, out.String(), "api listening")
	})

	// A kind whose hand-written args schema does not describe its args has
	// no OpenAPI document: Run refuses to start.
	t.Run("args schema that does not fit", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)

		out := &proctest.Buffer{}
		err := api.Run(context.Background(), apiConfig(t, db, out,
			func(*pgxpool.Pool) (*service.Registry, error) {
				svc, err := service.New(&service.Config{Name: "drifter", Kinds: []service.Kind{service.WorkerKind(&driftedWorker{})}})
				if err != nil {
					return nil, err
				}
				return service.NewRegistry(svc)
			}))
		require.EqualError(t, err, `api: openapi: kind drifted: api_test.driftedArgs.OpenAPISchema does not describe the args: property "target" is not a JSON field of the args; no property "targets" (a JSON field of the args)`)
		require.NotContains(t, out.String(), "api listening")
	})
}
