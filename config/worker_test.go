package config_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/service"
)

func baseWorkerEnv() []string {
	return []string{
		"DATABASE_URL=postgres://tierq:s3cret@127.0.0.1:5432/tierq",
		"WORKER_SERVICE=analyzer",
	}
}

// referenceServices is the reference app's registry, as cmd/worker loads
// its configuration with: no pool, the services only describe themselves.
func referenceServices(t testing.TB) *service.Registry {
	t.Helper()
	services, err := jobs.Registry(jobs.Deps{})
	require.NoError(t, err)
	return services
}

// loadWorker loads a worker configuration of the reference app.
func loadWorker(t testing.TB, environ []string) (config.Worker, error) {
	t.Helper()
	return config.LoadWorker(environ, referenceServices(t))
}

func TestWorkerDefaults(t *testing.T) {
	t.Parallel()

	cfg, err := loadWorker(t, baseWorkerEnv())
	require.NoError(t, err)
	require.Equal(t, "analyzer", cfg.Service)
	require.Equal(t, service.ClassWorkers{Priority: 5, Default: 3, Scheduled: 2}, cfg.Workers)
	require.Equal(t, time.Minute, cfg.JobTimeout)
	require.False(t, cfg.JobTimeoutSet())
	require.Equal(t, 25*time.Second, cfg.SoftStopTimeout)
	require.Equal(t, "text", cfg.Format)

	require.Equal(t, map[string]config.QueueClass{
		"analysis_priority":  {Workers: 5, FetchCooldown: time.Millisecond, PollInterval: 250 * time.Millisecond, FairShare: true},
		"analysis_default":   {Workers: 3, FetchCooldown: 100 * time.Millisecond, PollInterval: time.Second, FairShare: true},
		"analysis_scheduled": {Workers: 2, FetchCooldown: 250 * time.Millisecond, PollInterval: 2 * time.Second},
	}, cfg.Queues())

	cfg, err = loadWorker(t, []string{"DATABASE_URL=postgres://localhost/tierq", "WORKER_SERVICE=specgen"})
	require.NoError(t, err)
	require.Equal(t, "specgen", cfg.Service)
	require.Equal(t, service.ClassWorkers{Priority: 3, Default: 2, Scheduled: 1}, cfg.Workers)
	require.Equal(t, map[string]config.QueueClass{
		"specview_priority":  {Workers: 3, FetchCooldown: time.Millisecond, PollInterval: 250 * time.Millisecond, FairShare: true},
		"specview_default":   {Workers: 2, FetchCooldown: 100 * time.Millisecond, PollInterval: time.Second, FairShare: true},
		"specview_scheduled": {Workers: 1, FetchCooldown: 250 * time.Millisecond, PollInterval: 2 * time.Second},
	}, cfg.Queues())
}

// TestWorkerCountsOfTheSelectedService: a deployment takes its own
// service's counts; another service's, set in the same environment, are
// checked but not used.
func TestWorkerCountsOfTheSelectedService(t *testing.T) {
	t.Parallel()

	environ := []string{
		"DATABASE_URL=postgres://localhost/tierq",
		"ANALYZER_QUEUE_PRIORITY_WORKERS=9", "ANALYZER_QUEUE_DEFAULT_WORKERS=0",
		"SPECGEN_QUEUE_PRIORITY_WORKERS=7", "SPECGEN_QUEUE_SCHEDULED_WORKERS=",
	}
	analyzer, err := loadWorker(t, append(environ, "WORKER_SERVICE=analyzer"))
	require.NoError(t, err)
	require.Equal(t, service.ClassWorkers{Priority: 9, Default: 0, Scheduled: 2}, analyzer.Workers)
	specgen, err := loadWorker(t, append(environ, "WORKER_SERVICE=specgen"))
	require.NoError(t, err)
	require.Equal(t, service.ClassWorkers{Priority: 7, Default: 2, Scheduled: 1}, specgen.Workers, "empty keeps the default")
}

func TestWorkerLending(t *testing.T) {
	t.Parallel()

	environ := []string{"DATABASE_URL=postgres://localhost/tierq", "ANALYZER_LEND_IDLE_PRIORITY=true", "SPECGEN_LEND_FLOOR=2"}
	analyzer, err := loadWorker(t, append(environ, "WORKER_SERVICE=analyzer"))
	require.NoError(t, err)
	require.True(t, analyzer.Lend)
	require.Equal(t, 1, analyzer.LendFloor, "the default floor")
	specgen, err := loadWorker(t, append(environ, "WORKER_SERVICE=specgen"))
	require.NoError(t, err)
	require.False(t, specgen.Lend, "off unless asked")
	require.Equal(t, 2, specgen.LendFloor)
}

func TestWorkerZeroWorkersLeavesQueueOut(t *testing.T) {
	t.Parallel()

	cfg, err := loadWorker(t, []string{
		"DATABASE_URL=postgres://localhost/tierq", "WORKER_SERVICE=specgen",
		"SPECGEN_QUEUE_DEFAULT_WORKERS=0", "SPECGEN_QUEUE_SCHEDULED_WORKERS=0",
		"SPECGEN_QUEUE_PRIORITY_WORKERS=7",
	})
	require.NoError(t, err)
	require.Equal(t, map[string]config.QueueClass{
		"specview_priority": {Workers: 7, FetchCooldown: time.Millisecond, PollInterval: 250 * time.Millisecond, FairShare: true},
	}, cfg.Queues())
}

func TestWorkerBadValues(t *testing.T) {
	t.Parallel()

	tests := []badValue{
		{name: "missing database url", omit: "DATABASE_URL", wantVar: "DATABASE_URL", wantReason: "required"},
		{name: "bad metrics address", give: []string{"METRICS_ADDR=9090"}, wantVar: "METRICS_ADDR", wantValue: "9090", wantReason: "listen address"},
		{name: "empty database url", give: []string{"DATABASE_URL="}, wantVar: "DATABASE_URL", wantReason: "empty"},
		{name: "bad database url", give: []string{"DATABASE_URL=postgres://u:pw@host:notaport/db"}, wantVar: "DATABASE_URL", wantValue: "[redacted]", wantReason: "connection string"},
		{name: "missing service", omit: "WORKER_SERVICE", wantVar: "WORKER_SERVICE", wantReason: "required"},
		{name: "unknown service", give: []string{"WORKER_SERVICE=analysis"}, wantVar: "WORKER_SERVICE", wantValue: "analysis", wantReason: "unknown service (want analyzer or specgen)"},
		{name: "empty service", give: []string{"WORKER_SERVICE="}, wantVar: "WORKER_SERVICE", wantValue: "", wantReason: "unknown service (want analyzer or specgen)"},
		{name: "typo in count", give: []string{"ANALYZER_QUEUE_PRIORITY_WORKERS=5o"}, wantVar: "ANALYZER_QUEUE_PRIORITY_WORKERS", wantValue: "5o", wantReason: "not an integer"},
		{name: "count out of int range", give: []string{"ANALYZER_QUEUE_SCHEDULED_WORKERS=99999999999"}, wantVar: "ANALYZER_QUEUE_SCHEDULED_WORKERS", wantValue: "99999999999", wantReason: "out of range for an integer"},
		{name: "negative count", give: []string{"ANALYZER_QUEUE_DEFAULT_WORKERS=-1"}, wantVar: "ANALYZER_QUEUE_DEFAULT_WORKERS", wantValue: "-1", wantReason: "between 0 and 10000"},
		{name: "count over river limit", give: []string{"SPECGEN_QUEUE_SCHEDULED_WORKERS=10001"}, wantVar: "SPECGEN_QUEUE_SCHEDULED_WORKERS", wantValue: "10001", wantReason: "between 0 and 10000"},
		{name: "other service count checked too", give: []string{"SPECGEN_QUEUE_PRIORITY_WORKERS=x"}, wantVar: "SPECGEN_QUEUE_PRIORITY_WORKERS", wantValue: "x", wantReason: "not an integer"},
		{name: "no queue served", give: []string{"ANALYZER_QUEUE_PRIORITY_WORKERS=0", "ANALYZER_QUEUE_DEFAULT_WORKERS=0", "ANALYZER_QUEUE_SCHEDULED_WORKERS=0"}, wantVar: "WORKER_SERVICE", wantValue: "analyzer", wantReason: "serves no queue: set at least one of ANALYZER_QUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS above 0"},
		{name: "other service serving no queue is fine", give: []string{"WORKER_SERVICE=specgen", "ANALYZER_QUEUE_PRIORITY_WORKERS=0", "ANALYZER_QUEUE_DEFAULT_WORKERS=0", "ANALYZER_QUEUE_SCHEDULED_WORKERS=0", "SPECGEN_QUEUE_DEFAULT_WORKERS=-2"}, wantVar: "SPECGEN_QUEUE_DEFAULT_WORKERS", wantValue: "-2", wantReason: "between 0 and 10000"},
		{name: "bad duration", give: []string{"QUEUE_PRIORITY_FETCH_COOLDOWN=50"}, wantVar: "QUEUE_PRIORITY_FETCH_COOLDOWN", wantValue: "50", wantReason: "not a duration"},
		{name: "cooldown too small", give: []string{"QUEUE_DEFAULT_FETCH_COOLDOWN=100us"}, wantVar: "QUEUE_DEFAULT_FETCH_COOLDOWN", wantValue: "100us", wantReason: "between 1ms and 1m"},
		{name: "poll shorter than cooldown", give: []string{"QUEUE_SCHEDULED_FETCH_POLL_INTERVAL=100ms"}, wantVar: "QUEUE_SCHEDULED_FETCH_POLL_INTERVAL", wantValue: "100ms", wantReason: "shorter than the fetch cooldown"},
		{name: "zero job timeout", give: []string{"JOB_TIMEOUT=0s"}, wantVar: "JOB_TIMEOUT", wantValue: "0s", wantReason: "positive"},
		{name: "max attempts zero", give: []string{"MAX_ATTEMPTS=0"}, wantVar: "MAX_ATTEMPTS", wantValue: "0", wantReason: "between 1 and 1000"},
		{name: "negative soft stop", give: []string{"SOFT_STOP_TIMEOUT=-1s"}, wantVar: "SOFT_STOP_TIMEOUT", wantValue: "-1s", wantReason: "negative"},
		{name: "bad log level", give: []string{"LOG_LEVEL=verbose"}, wantVar: "LOG_LEVEL", wantValue: "verbose", wantReason: "unknown name"},
		{name: "bad log format", give: []string{"LOG_FORMAT=xml"}, wantVar: "LOG_FORMAT", wantValue: "xml", wantReason: "text or json"},
		{name: "bad bool", give: []string{"LOAD_TEST_WORKLOAD=yes please"}, wantVar: "LOAD_TEST_WORKLOAD", wantValue: "yes please", wantReason: "not a boolean"},
		{name: "bad schema", give: []string{"DATABASE_SCHEMA=Public; drop"}, wantVar: "DATABASE_SCHEMA", wantValue: "Public; drop", wantReason: "identifier"},
		{name: "pool too small", give: []string{"DATABASE_MAX_CONNS=1"}, wantVar: "DATABASE_MAX_CONNS", wantValue: "1", wantReason: "between 2 and 1000"},
		{name: "bad lend flag", give: []string{"ANALYZER_LEND_IDLE_PRIORITY=sometimes"}, wantVar: "ANALYZER_LEND_IDLE_PRIORITY", wantValue: "sometimes", wantReason: "not a boolean"},
		{name: "negative lend floor", give: []string{"ANALYZER_LEND_FLOOR=-1"}, wantVar: "ANALYZER_LEND_FLOOR", wantValue: "-1", wantReason: "between 0 and 10000"},
		{name: "other service's lend floor checked too", give: []string{"SPECGEN_LEND_FLOOR=one"}, wantVar: "SPECGEN_LEND_FLOOR", wantValue: "one", wantReason: "not an integer"},
		{name: "bad fair share flag", give: []string{"QUEUE_DEFAULT_FAIR_SHARE=on"}, wantVar: "QUEUE_DEFAULT_FAIR_SHARE", wantValue: "on", wantReason: "not a boolean"},
		{name: "negative pass interval", give: []string{"FAIR_SHARE_PASS_INTERVAL=-1ms"}, wantVar: "FAIR_SHARE_PASS_INTERVAL", wantValue: "-1ms", wantReason: "between 0 and 1s"},
	}
	checkBadValues(t, baseWorkerEnv(), tests, func(environ []string) (config.Worker, error) { return loadWorker(t, environ) })
}

// badValue is one case of a table of invalid environments.
type badValue struct {
	name       string
	give       []string // on top of the base environment, later entries win
	omit       string   // variable to remove from the base environment
	wantVar    string
	wantValue  string
	wantReason string
}

// runBadValues loads each case's environment as a T and checks that the
// error names the variable, quotes the value and gives the reason.
func runBadValues[T any, PT interface {
	*T
	config.Validator
}](t *testing.T, base []string, tests []badValue) {
	t.Helper()
	checkBadValues(t, base, tests, config.Load[T, PT])
}

// checkBadValues is runBadValues with its own load function.
func checkBadValues[T any](t *testing.T, base []string, tests []badValue, load func(environ []string) (T, error)) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var environ []string
			for _, kv := range base {
				if tt.omit == "" || !strings.HasPrefix(kv, tt.omit+"=") {
					environ = append(environ, kv)
				}
			}
			environ = append(environ, tt.give...)

			_, err := load(environ)
			require.ErrorIs(t, err, config.ErrInvalid)

			var cfgErr *config.Error
			require.ErrorAs(t, err, &cfgErr)
			require.Equal(t, tt.wantVar, cfgErr.Var, err.Error())
			require.Equal(t, tt.wantValue, cfgErr.Value, err.Error())
			require.Contains(t, cfgErr.Reason, tt.wantReason)
			require.Contains(t, err.Error(), tt.wantVar)
		})
	}
}

func TestWorkerEveryBadVariableReported(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		give []string
		want []string
	}{
		{name: "checks", give: []string{"ANALYZER_QUEUE_PRIORITY_WORKERS=-3", "LOG_FORMAT=yaml"},
			want: []string{"ANALYZER_QUEUE_PRIORITY_WORKERS", "LOG_FORMAT"}},
		// A variable that does not parse stops the checks of the struct's
		// fields, not those of the variables named after the services.
		{name: "with one that does not parse", give: []string{"LOG_LEVEL=verbose", "SPECGEN_QUEUE_PRIORITY_WORKERS=x", "WORKER_SERVICE=mailer"},
			want: []string{"LOG_LEVEL", "SPECGEN_QUEUE_PRIORITY_WORKERS", "WORKER_SERVICE"}},
		{name: "with an empty required variable", give: []string{"DATABASE_URL=", "ANALYZER_QUEUE_DEFAULT_WORKERS=3x"},
			want: []string{"DATABASE_URL", "ANALYZER_QUEUE_DEFAULT_WORKERS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := loadWorker(t, append(baseWorkerEnv(), tt.give...))
			var errs config.Errors
			require.True(t, errors.As(err, &errs))
			vars := make([]string, 0, len(errs))
			for _, e := range errs {
				vars = append(vars, e.Var)
			}
			require.ElementsMatch(t, tt.want, vars, err.Error())
		})
	}
}

// Test kind of another team's service.
type sendArgs struct {
	To string `json:"to"`
}

func (sendArgs) Kind() string { return "send_mail" }

type sendWorker struct{ river.WorkerDefaults[sendArgs] }

func (*sendWorker) Work(context.Context, *river.Job[sendArgs]) error { return nil }

// TestWorkerOfAnotherService: the variables of a worker deployment derive
// from the names in the registry it is loaded with, for any service, and
// the registry decides which WORKER_SERVICE values exist.
func TestWorkerOfAnotherService(t *testing.T) {
	t.Parallel()

	mailer, err := service.New(&service.Config{
		Name:      "mailer",
		BaseQueue: "mail",
		Kinds:     []service.Kind{service.WorkerKind(&sendWorker{})},
		Workers:   &service.ClassWorkers{Priority: 4, Default: 2, Scheduled: 0},
	})
	require.NoError(t, err)
	onlyMailer, err := service.NewRegistry(mailer)
	require.NoError(t, err)
	mailerAndReference, err := referenceServices(t).Join(onlyMailer)
	require.NoError(t, err)

	base := []string{"DATABASE_URL=postgres://localhost/app", "WORKER_SERVICE=mailer"}

	cfg, err := config.LoadWorker(base, onlyMailer)
	require.NoError(t, err)
	require.Equal(t, "mailer", cfg.Service)
	require.Equal(t, service.ClassWorkers{Priority: 4, Default: 2, Scheduled: 0}, cfg.Workers)
	require.Equal(t, map[string]config.QueueClass{
		"mail_priority": {Workers: 4, FetchCooldown: time.Millisecond, PollInterval: 250 * time.Millisecond, FairShare: true},
		"mail_default":  {Workers: 2, FetchCooldown: 100 * time.Millisecond, PollInterval: time.Second, FairShare: true},
	}, cfg.Queues())

	cfg, err = config.LoadWorker(append(base,
		"MAILER_QUEUE_PRIORITY_WORKERS=12", "MAILER_QUEUE_DEFAULT_WORKERS=0", "MAILER_QUEUE_SCHEDULED_WORKERS=1",
		"ANALYZER_QUEUE_PRIORITY_WORKERS=oops", // no such service here: not a variable of this application
	), onlyMailer)
	require.NoError(t, err)
	require.Equal(t, service.ClassWorkers{Priority: 12, Default: 0, Scheduled: 1}, cfg.Workers)
	require.Equal(t, map[string]config.QueueClass{
		"mail_priority":  {Workers: 12, FetchCooldown: time.Millisecond, PollInterval: 250 * time.Millisecond, FairShare: true},
		"mail_scheduled": {Workers: 1, FetchCooldown: 250 * time.Millisecond, PollInterval: 2 * time.Second},
	}, cfg.Queues())

	checkBadValues(t, base, []badValue{
		{name: "typo in count", give: []string{"MAILER_QUEUE_PRIORITY_WORKERS=4o"}, wantVar: "MAILER_QUEUE_PRIORITY_WORKERS", wantValue: "4o", wantReason: "not an integer"},
		{name: "count over river limit", give: []string{"MAILER_QUEUE_SCHEDULED_WORKERS=10001"}, wantVar: "MAILER_QUEUE_SCHEDULED_WORKERS", wantValue: "10001", wantReason: "must be between 0 and 10000"},
		{name: "no queue served", give: []string{"MAILER_QUEUE_PRIORITY_WORKERS=0", "MAILER_QUEUE_DEFAULT_WORKERS=0"}, wantVar: "WORKER_SERVICE", wantValue: "mailer",
			wantReason: "serves no queue: set at least one of MAILER_QUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS above 0"},
		{name: "unknown service", give: []string{"WORKER_SERVICE=analyzer"}, wantVar: "WORKER_SERVICE", wantValue: "analyzer", wantReason: "unknown service (want mailer)"},
	}, func(environ []string) (config.Worker, error) { return config.LoadWorker(environ, onlyMailer) })

	// Beside the reference app's services: every service's variables are
	// checked, whichever the deployment serves.
	checkBadValues(t, base, []badValue{
		{name: "unknown service", give: []string{"WORKER_SERVICE=billing"}, wantVar: "WORKER_SERVICE", wantValue: "billing", wantReason: "unknown service (want analyzer, specgen or mailer)"},
		{name: "another service's count", give: []string{"SPECGEN_QUEUE_DEFAULT_WORKERS=two"}, wantVar: "SPECGEN_QUEUE_DEFAULT_WORKERS", wantValue: "two", wantReason: "not an integer"},
		{name: "own count", give: []string{"MAILER_QUEUE_DEFAULT_WORKERS=-1"}, wantVar: "MAILER_QUEUE_DEFAULT_WORKERS", wantValue: "-1", wantReason: "must be between 0 and 10000"},
	}, func(environ []string) (config.Worker, error) { return config.LoadWorker(environ, mailerAndReference) })

	_, err = config.LoadWorker([]string{"DATABASE_URL=postgres://localhost/app", "WORKER_SERVICE=mailer"}, mailerAndReference)
	require.NoError(t, err)
	_, err = config.LoadWorker([]string{"DATABASE_URL=postgres://localhost/app", "WORKER_SERVICE=billing"}, mailerAndReference)
	require.EqualError(t, err, `invalid configuration: WORKER_SERVICE="billing": unknown service (want analyzer, specgen or mailer)`)
}

// TestWorkerNeedsItsServices: a Worker loaded without the application's
// services could not know its variables; that is a programming error.
func TestWorkerNeedsItsServices(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "config: a Worker is loaded with LoadWorker, which knows the application's services", func() {
		_, _ = config.Load[config.Worker](baseWorkerEnv())
	})
	require.PanicsWithValue(t, "config: a Worker is loaded with LoadWorker, which knows the application's services", func() {
		_, _ = config.Load[config.Worker](nil) // parsing fails too
	})
	require.PanicsWithValue(t, "config: LoadWorker needs the application's services", func() {
		_, _ = config.LoadWorker(baseWorkerEnv(), nil)
	})
}

func TestDatabasePasswordRedacted(t *testing.T) {
	t.Parallel()

	_, err := loadWorker(t, []string{
		"DATABASE_URL=postgres://tierq:hunter2@db/tierq?sslmode=bogus", "WORKER_SERVICE=analyzer",
	})
	require.ErrorContains(t, err, "DATABASE_URL")
	require.NotContains(t, err.Error(), "hunter2")
	require.Contains(t, err.Error(), "xxxxx")
}

func TestPoolConfigSchema(t *testing.T) {
	t.Parallel()

	cfg, err := loadWorker(t, append(baseWorkerEnv(), "DATABASE_SCHEMA=tenant_a", "DATABASE_MAX_CONNS=7"))
	require.NoError(t, err)
	poolConfig, err := cfg.PoolConfig()
	require.NoError(t, err)
	require.Equal(t, "tenant_a", poolConfig.ConnConfig.RuntimeParams["search_path"])
	require.EqualValues(t, 7, poolConfig.MaxConns)
}
