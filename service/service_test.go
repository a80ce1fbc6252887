package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// Test kinds: sendArgs validates itself (pointer receiver), thumbArgs does
// not.
type sendArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (sendArgs) Kind() string { return "send_mail" }

func (a *sendArgs) Validate() error {
	if a.To == "" {
		return errNoRecipient
	}
	return nil
}

type testError string

func (e testError) Error() string { return string(e) }

const errNoRecipient = testError("to is required")

type sendWorker struct{ river.WorkerDefaults[sendArgs] }

func (*sendWorker) Work(context.Context, *river.Job[sendArgs]) error { return nil }

type thumbArgs struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (thumbArgs) Kind() string { return "thumbnail" }

type thumbWorker struct {
	river.WorkerDefaults[thumbArgs]
}

func (*thumbWorker) Work(context.Context, *river.Job[thumbArgs]) error { return nil }

// purgeArgs are a periodic kind: the mailer's maintenance, worked by the
// scheduler.
type purgeArgs struct{}

func (purgeArgs) Kind() string { return "purge_bounces" }

type purgeWorker struct {
	river.WorkerDefaults[purgeArgs]
}

func (*purgeWorker) Work(context.Context, *river.Job[purgeArgs]) error { return nil }

func mustNew(t *testing.T, cfg *service.Config) *service.Service {
	t.Helper()
	s, err := service.New(cfg)
	require.NoError(t, err)
	return s
}

func TestNewAppliesDefaults(t *testing.T) {
	t.Parallel()
	s := mustNew(t, &service.Config{Name: "mailer", Kinds: []service.Kind{service.WorkerKind(&sendWorker{})}})
	require.Equal(t, "mailer", s.Name())
	require.Equal(t, "mailer", s.BaseQueue())
	require.Equal(t, []string{"mailer_priority", "mailer_default", "mailer_scheduled"}, s.Queues())
	require.Equal(t, service.ClassWorkers{Priority: 5, Default: 3, Scheduled: 2}, s.Workers())
	require.Equal(t, "MAILER_", s.EnvPrefix())
	require.Empty(t, s.PeriodicJobs())
	require.Empty(t, s.PeriodicKinds())

	cfg := &service.Config{
		Name: "media", BaseQueue: "thumbs", Kinds: []service.Kind{service.WorkerKind(&thumbWorker{})},
		Workers: &service.ClassWorkers{Priority: 2, Default: 1, Scheduled: 0},
	}
	s = mustNew(t, cfg)
	cfg.Workers.Priority = 99 // a copy was taken
	cfg.BaseQueue = "other"
	require.Equal(t, "thumbs_default", s.Queue(routing.Default))
	require.Equal(t, service.ClassWorkers{Priority: 2, Default: 1, Scheduled: 0}, s.Workers())

	opts := s.InsertOpts(tiers.Enterprise, "u_1", false)
	require.Equal(t, "thumbs_priority", opts.Queue)
	require.Equal(t, 2, opts.Priority)
	require.JSONEq(t, `{"tierq:tier": "enterprise", "tierq:tenant": "u_1", "tierq:original_queue": "thumbs_priority", "tierq:original_priority": 2}`, string(opts.Metadata))
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	send := service.WorkerKind(&sendWorker{})
	tests := []struct {
		name string
		give *service.Config
		want string
	}{
		{"nil", nil, "nil config"},
		{"no name", &service.Config{Kinds: []service.Kind{send}}, `name "" must be`},
		{"upper case", &service.Config{Name: "Mailer", Kinds: []service.Kind{send}}, `name "Mailer" must be`},
		{"starts with a digit", &service.Config{Name: "1mail", Kinds: []service.Kind{send}}, `name "1mail" must be`},
		{"dash", &service.Config{Name: "mail-er", Kinds: []service.Kind{send}}, `name "mail-er" must be`},
		{"bad base queue", &service.Config{Name: "mailer", BaseQueue: "Mail Queue", Kinds: []service.Kind{send}}, `base queue "Mail Queue" must be`},
		{"no kinds", &service.Config{Name: "mailer"}, "at least one kind is required"},
		{"zero kind", &service.Config{Name: "mailer", Kinds: []service.Kind{{}}}, "kind 0 is not made by WorkerKind"},
		{"kind twice", &service.Config{Name: "mailer", Kinds: []service.Kind{send, send}}, `kind "send_mail" is listed twice`},
		{"kind also periodic", &service.Config{Name: "mailer", Kinds: []service.Kind{send}, PeriodicKinds: []service.Kind{send}}, `kind "send_mail" is listed twice`},
		{"zero periodic kind", &service.Config{Name: "mailer", Kinds: []service.Kind{send}, PeriodicKinds: []service.Kind{{}}}, "periodic kind 0 is not made by WorkerKind"},
		{"negative workers", &service.Config{Name: "mailer", Kinds: []service.Kind{send}, Workers: &service.ClassWorkers{Priority: -1}}, "priority workers -1 not in 0..10000"},
		{"too many workers", &service.Config{Name: "mailer", Kinds: []service.Kind{send}, Workers: &service.ClassWorkers{Scheduled: 10_001}}, "scheduled workers 10001 not in 0..10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := service.New(tt.give)
			require.ErrorIs(t, err, service.ErrInvalid)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	mailer := mustNew(t, &service.Config{Name: "mailer", Kinds: []service.Kind{service.WorkerKind(&sendWorker{})}})
	media := mustNew(t, &service.Config{Name: "media", BaseQueue: "thumbs", Kinds: []service.Kind{service.WorkerKind(&thumbWorker{})}})

	r, err := service.NewRegistry(mailer, media)
	require.NoError(t, err)
	require.Equal(t, []string{"mailer", "media"}, r.Names())
	require.Equal(t, []string{"mailer_priority", "mailer_default", "mailer_scheduled", "thumbs_priority", "thumbs_default", "thumbs_scheduled"}, r.Queues())
	require.Equal(t, []string{"mailer_default", "mailer_scheduled", "thumbs_default", "thumbs_scheduled"}, r.QueuesOf(routing.Default, routing.Scheduled))
	require.Equal(t, []string{"send_mail", "thumbnail"}, r.KindNames())

	s, class, ok := r.ForQueue("thumbs_scheduled")
	require.True(t, ok)
	require.Equal(t, media, s)
	require.Equal(t, routing.Scheduled, class)
	for _, q := range []string{"media_priority", "thumbs", "thumbs_urgent", "scheduler", ""} {
		_, _, ok := r.ForQueue(q)
		require.False(t, ok, q)
	}
	s, kind, ok := r.ForKind("send_mail")
	require.True(t, ok)
	require.Equal(t, mailer, s)
	require.Equal(t, "send_mail", kind.Name())
	_, _, ok = r.ForKind("analysis")
	require.False(t, ok)

	got, err := r.Parse("media")
	require.NoError(t, err)
	require.Equal(t, media, got)
	_, err = r.Parse("analyzer")
	require.EqualError(t, err, `unknown service "analyzer" (want mailer or media)`)

	workers := river.NewWorkers()
	require.NoError(t, r.AddWorkers(workers))
	// River refuses a second worker for a kind: both kinds are registered.
	require.Error(t, river.AddWorkerSafely(workers, &sendWorker{}))
	require.Error(t, river.AddWorkerSafely(workers, &thumbWorker{}))
}

// TestPeriodicKinds: a service's maintenance kinds are registered for the
// scheduler (Registry.AddWorkers) with its periodic jobs, but they are not
// the service's work: its workers do not register them and ForKind does
// not find them.
func TestPeriodicKinds(t *testing.T) {
	t.Parallel()
	purge := river.NewPeriodicJob(river.PeriodicInterval(time.Hour), func() (river.JobArgs, *river.InsertOpts) {
		return purgeArgs{}, &river.InsertOpts{Queue: "scheduler"}
	}, nil)
	mailer := mustNew(t, &service.Config{
		Name: "mailer", Kinds: []service.Kind{service.WorkerKind(&sendWorker{})},
		PeriodicJobs: []*river.PeriodicJob{purge}, PeriodicKinds: []service.Kind{service.WorkerKind(&purgeWorker{})},
	})
	r, err := service.NewRegistry(mailer)
	require.NoError(t, err)
	require.Equal(t, []*river.PeriodicJob{purge}, r.PeriodicJobs())
	require.Equal(t, "purge_bounces", mailer.PeriodicKinds()[0].Name())
	require.Equal(t, []string{"send_mail"}, r.KindNames())
	_, _, ok := r.ForKind("purge_bounces")
	require.False(t, ok, "not a kind a producer may insert as the mailer's work")

	scheduler := river.NewWorkers()
	require.NoError(t, r.AddWorkers(scheduler))
	require.Error(t, river.AddWorkerSafely(scheduler, &purgeWorker{}), "registered for the scheduler")
	workers := river.NewWorkers()
	require.NoError(t, mailer.AddWorkers(workers))
	require.NoError(t, river.AddWorkerSafely(workers, &purgeWorker{}), "not registered for the mailer's workers")
}

func TestRegistryRefusesConflicts(t *testing.T) {
	t.Parallel()
	send := service.WorkerKind(&sendWorker{})
	thumb := service.WorkerKind(&thumbWorker{})
	mailer := mustNew(t, &service.Config{Name: "mailer", Kinds: []service.Kind{send}})
	tests := []struct {
		name string
		give []*service.Service
		want string
	}{
		{"same name", []*service.Service{mailer, mustNew(t, &service.Config{Name: "mailer", BaseQueue: "other", Kinds: []service.Kind{thumb}})}, `two services are named "mailer"`},
		{"same base queue", []*service.Service{mailer, mustNew(t, &service.Config{Name: "media", BaseQueue: "mailer", Kinds: []service.Kind{thumb}})}, `services "mailer" and "media" share base queue "mailer"`},
		{"same kind", []*service.Service{mailer, mustNew(t, &service.Config{Name: "media", Kinds: []service.Kind{send}})}, `services "mailer" and "media" both work kind "send_mail"`},
		{"a kind periodic elsewhere", []*service.Service{mailer, mustNew(t, &service.Config{Name: "media", Kinds: []service.Kind{thumb}, PeriodicKinds: []service.Kind{send}})}, `services "mailer" and "media" both work kind "send_mail"`},
		{"nil", []*service.Service{nil}, "a nil service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := service.NewRegistry(tt.give...)
			require.ErrorIs(t, err, service.ErrInvalid)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestJoin(t *testing.T) {
	t.Parallel()
	mailer := mustNew(t, &service.Config{Name: "mailer", Kinds: []service.Kind{service.WorkerKind(&sendWorker{})}})
	media := mustNew(t, &service.Config{Name: "media", Kinds: []service.Kind{service.WorkerKind(&thumbWorker{})}})
	a, err := service.NewRegistry(mailer)
	require.NoError(t, err)
	b, err := service.NewRegistry(media, mailer)
	require.NoError(t, err)
	joined, err := a.Join(b)
	require.NoError(t, err)
	require.Equal(t, []string{"mailer", "media"}, joined.Names(), "a service in both counts once")
	require.Equal(t, []string{"mailer"}, a.Names(), "a is unchanged")

	clash := mustNew(t, &service.Config{Name: "other", BaseQueue: "mailer", Kinds: []service.Kind{service.WorkerKind(&thumbWorker{})}})
	c, err := service.NewRegistry(clash)
	require.NoError(t, err)
	_, err = a.Join(c)
	require.ErrorContains(t, err, `share base queue "mailer"`)
}

func TestDecodeArgs(t *testing.T) {
	t.Parallel()
	send := service.WorkerKind(&sendWorker{})
	thumb := service.WorkerKind(&thumbWorker{})

	args, err := send.DecodeArgs([]byte(`{"to": "a@example.com", "subject": "hi"}`))
	require.NoError(t, err)
	require.Equal(t, sendArgs{To: "a@example.com", Subject: "hi"}, args, "the args value, ready to insert")

	args, err = thumb.DecodeArgs([]byte(`{"image": "x.png", "width": 64}`))
	require.NoError(t, err)
	require.Equal(t, thumbArgs{Image: "x.png", Width: 64}, args)

	tests := []struct {
		name string
		kind service.Kind
		give string
		want string
	}{
		{"unknown field", thumb, `{"image": "x.png", "tier": "pro"}`, `unknown field "tier"`},
		{"wrong type", thumb, `{"width": "wide"}`, "cannot unmarshal string"},
		{"trailing data", thumb, `{"width": 1} {}`, "args must be a JSON object"},
		{"not JSON", thumb, `nope`, "args must be a JSON object"},
		{"refused by Validate", send, `{"subject": "hi"}`, "to is required"},
		{"zero Kind", service.Kind{}, `{}`, "kind not made by WorkerKind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.kind.DecodeArgs([]byte(tt.give))
			require.ErrorContains(t, err, tt.want)
		})
	}
}
