package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

// A slow kind of the mailer: five minutes.
type digestArgs struct{}

func (digestArgs) Kind() string { return "send_digest" }

type digestWorker struct {
	river.WorkerDefaults[digestArgs]
}

func (*digestWorker) Work(context.Context, *river.Job[digestArgs]) error { return nil }

func TestSessionPoolConfig(t *testing.T) {
	t.Parallel()
	slowMailer, err := service.New(&service.Config{
		Name:      "mailer",
		BaseQueue: "mail",
		Kinds: []service.Kind{
			service.WorkerKind(&sendWorker{}),
			service.WorkerKind(&digestWorker{}, service.Timeout[digestArgs](5*time.Minute)),
		},
		Workers: &service.ClassWorkers{Priority: 1},
	})
	require.NoError(t, err)

	tests := []struct {
		name     string
		registry *service.Registry
		loadTest bool
		url      string
		want     string // the parameter's value
	}{
		{name: "the kinds' default timeout", registry: newRegistry(t, newMailer(t, nil, "mail")),
			url: "postgres://u@db/tierq", want: "60000"},
		{name: "the load-test workload's", registry: newRegistry(t, newMailer(t, nil, "mail")), loadTest: true,
			url: "postgres://u@db/tierq", want: "60000"},
		{name: "the longest kind's", registry: newRegistry(t, slowMailer),
			url: "postgres://u@db/tierq", want: "300000"},
		{name: "set in the URL", registry: newRegistry(t, slowMailer),
			url: "postgres://u@db/tierq?idle_in_transaction_session_timeout=90s", want: "90s"},
		{name: "turned off in the URL", registry: newRegistry(t, slowMailer),
			url: "postgres://u@db/tierq?idle_in_transaction_session_timeout=0", want: "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := worker.New(worker.Config{Registry: tt.registry, Service: "mailer", LoadTestWorkload: tt.loadTest})
			require.NoError(t, err)
			base, err := pgxpool.ParseConfig(tt.url)
			require.NoError(t, err)
			before := base.ConnString()
			got := w.SessionPoolConfig(base)
			require.Equal(t, tt.want, got.ConnConfig.RuntimeParams[worker.IdleInTransactionParam])
			require.Equal(t, before, base.ConnString(), "poolConfig unchanged")
			_, set := base.ConnConfig.RuntimeParams[worker.IdleInTransactionParam]
			require.Equal(t, tt.want == "90s" || tt.want == "0", set, "the caller's configuration is not changed")
		})
	}
}
