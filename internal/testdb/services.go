package testdb

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/service"
)

// Registry is the reference app's registry (jobs.Registry: the analyzer's
// analysis_* queues, then the spec generator's specview_* queues) without
// its workers' dependencies: for the tests that need its services, queues
// and kinds, not a worker that runs.
func Registry(t testing.TB) *service.Registry {
	t.Helper()
	registry, err := jobs.Registry(jobs.Deps{})
	require.NoError(t, err)
	return registry
}

// Service is the reference app's service named name ("analyzer" or
// "specgen"), without workers' dependencies.
func Service(t testing.TB, name string) *service.Service {
	t.Helper()
	svc, ok := Registry(t).Lookup(name)
	require.True(t, ok, "no service %q", name)
	return svc
}

// SendMailArgs are the args of KindSendMail, the one kind of the mailer
// service (MailerRegistry).
type SendMailArgs struct {
	To string `json:"to"`
}

// KindSendMail is the mailer service's kind.
const KindSendMail = "send_mail"

func (SendMailArgs) Kind() string { return KindSendMail }

// sendMailWorker sends nothing: the mailer's workers are never run.
type sendMailWorker struct {
	river.WorkerDefaults[SendMailArgs]
}

func (*sendMailWorker) Work(context.Context, *river.Job[SendMailArgs]) error { return nil }

// MailerRegistry is the registry of one service that is not the reference
// app's, as a team would add its own: "mailer", kind send_mail, queues
// mailer_priority, mailer_default and mailer_scheduled. Tests use it to show
// that tierq's core works with any service, not only analysis_* and
// specview_*.
func MailerRegistry(t testing.TB) *service.Registry {
	t.Helper()
	mailer, err := service.New(&service.Config{
		Name:  "mailer",
		Kinds: []service.Kind{service.WorkerKind(&sendMailWorker{})},
	})
	require.NoError(t, err)
	registry, err := service.NewRegistry(mailer)
	require.NoError(t, err)
	return registry
}
