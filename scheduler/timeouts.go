package scheduler

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tierq/tierq/aging"
	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/service"
)

// Timeouts of the scheduler's own kinds, which each kind declares
// (service.Timeout) as every kind does: River applies it in the process
// that runs the job and in the leader's rescuer alike. Every sweep works in
// batches of at most Config.SweepBatch (DLQDrainBatch) rows, each batch its own
// short transaction, so a run cut short by its timeout keeps what it did,
// and the next period carries on.
const (
	// AgingSweepTimeout: a backlog of a million waiting jobs is a thousand
	// batch statements of a few milliseconds each.
	AgingSweepTimeout = time.Minute
	// EscalationSweepTimeout: as the aging sweep.
	EscalationSweepTimeout = time.Minute
	// DLQDrainTimeout covers the drain and the depth alert after it, whose
	// webhook call is bounded by Config.DLQAlertTimeout (at most
	// MaxDLQAlertTimeout, half of this).
	DLQDrainTimeout = time.Minute
)

// ownKinds are the scheduler's own kinds, each with its timeout: the aging
// and escalation sweeps over queues and the dead-letter drain with its
// depth alert (as source id).
func ownKinds(cfg *Config, pool *pgxpool.Pool, m *metrics.Scheduler, id string, queues []string) []service.Kind {
	logger := cfg.Logger
	return []service.Kind{
		service.WorkerKind(&AgingSweepWorker{pool: pool, logger: logger, metrics: m, settings: aging.Settings{
			Step: cfg.AgingStep, MaxPriority: cfg.AgingMaxPriority, Queues: queues, Batch: cfg.SweepBatch,
		}}, service.Timeout[AgingSweepArgs](AgingSweepTimeout)),
		service.WorkerKind(&EscalationSweepWorker{pool: pool, logger: logger, metrics: m, queues: queues,
			rules: escalation.Rules(cfg.escalateScheduledAfter(), cfg.EscalateDefaultAfter), batch: cfg.SweepBatch},
			service.Timeout[EscalationSweepArgs](EscalationSweepTimeout)),
		service.WorkerKind(&DLQDrainWorker{pool: pool, logger: logger, batch: cfg.DLQDrainBatch,
			alerter: dlq.NewAlerter(dlq.AlertConfig{
				Threshold:  cfg.dlqAlertThreshold(),
				WebhookURL: cfg.DLQAlertWebhookURL,
				Interval:   cfg.DLQAlertInterval,
				Timeout:    cfg.DLQAlertTimeout,
				Source:     id,
			}, logger)}, service.Timeout[DLQDrainArgs](DLQDrainTimeout)),
	}
}

// Timeouts are the timeout of every job kind a scheduler deployment of
// services registers, by kind: the scheduler's own kinds', the kinds and
// periodic kinds of services (service.Registry.Timeouts; services may be
// nil) and extra's (the kinds of Config.ExtraKinds). Each is the timeout the kind
// declares (service.Timeout, or service.DefaultTimeout), which River
// applies to its jobs, so none can be left out. Config.RescueStuckJobsAfter
// must be longer than each (CheckKindTimeouts): Run checks it.
func Timeouts(services *service.Registry, extra ...service.Kind) map[string]time.Duration {
	timeouts := map[string]time.Duration{}
	if services != nil {
		timeouts = services.Timeouts()
	}
	for _, k := range extra {
		timeouts[k.Name()] = k.Timeout()
	}
	for _, k := range ownKinds(&Config{}, nil, nil, "", nil) {
		timeouts[k.Name()] = k.Timeout()
	}
	return timeouts
}

var (
	_ river.Worker[AgingSweepArgs]      = (*AgingSweepWorker)(nil)
	_ river.Worker[EscalationSweepArgs] = (*EscalationSweepWorker)(nil)
	_ river.Worker[DLQDrainArgs]        = (*DLQDrainWorker)(nil)
)
