// Package producer is the insert path for API services: the queue and
// priority from the user's tier (the service's InsertOpts), River unique
// options that ignore the queue, dedup that upgrades tier, and the tenant's
// daily quota (package limits), counted in the inserting transaction.
//
// When a job is inserted while an equal one (same kind and unique args) is
// still queued, River returns the queued job instead of a new one. If the new
// insert's tier would place it better — a better class of queue, or the same
// class at a better priority — the queued job is escalated there, audited with
// actor "dedup". A paying customer never waits behind a free duplicate of
// their own request; a free duplicate never downgrades a paid job.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// DefaultMaxAttempts is how many times a job tierq inserts is tried before
// River discards it (and tierq's drain makes it a dead letter), unless its
// kind declares its own (service.MaxAttempts) or the inserter sets one: the
// MaxAttempts of ClientConfig, and the default of MAX_ATTEMPTS in tierq's
// API, worker and scheduler (config.API, config.Jobs). River's own default
// is 25, whose last retry comes about 20 days after the first failure with
// River's backoff; with 10 it comes about 4 hours 15 minutes after it
// (docs/library.md, "Attempts and retries").
const DefaultMaxAttempts = 10

// UniqueOpts makes a job unique by its kind and its args' `river:"unique"`
// fields, or all its args' fields when none is tagged (River's ByArgs: the
// whole encoded args, keys sorted), in every queue (ByQueue is off, so a job escalated to another queue
// is still the same job), while it is queued or running. A finished job does
// not block a new one.
func UniqueOpts() river.UniqueOpts {
	return river.UniqueOpts{
		ByArgs: true,
		ByState: []rivertype.JobState{
			rivertype.JobStateAvailable,
			rivertype.JobStatePending,
			rivertype.JobStateRetryable,
			rivertype.JobStateRunning,
			rivertype.JobStateScheduled,
		},
	}
}

// NotifyCooldown is the producer client's River FetchCooldown. River uses
// the inserting client's FetchCooldown to rate-limit the LISTEN/NOTIFY
// wake-up it sends per queue on insert: with River's default (100ms) a job
// inserted less than 100ms after the previous notification of its queue
// sends none and waits for the next one, or for the worker's poll (up to its
// poll interval). At 1ms, River's smallest, an insert stays silent only when
// another insert of its queue notified less than 1ms before it, so even 16
// producers inserting at once (320 jobs/s) wake the worker for nearly every
// job (docs/benchmarks.md: the isolation scenario's concurrent phase), at
// the cost of up to 1,000 notifications per second per queue and producer;
// PostgreSQL serialises the commits of transactions that notify, which the
// insert benchmark measures with 16 concurrent producers. Insert notifies
// every job it inserts whatever the limit (NotifyInsert); the limit is what
// the client's other inserts (InsertTx and InsertMany called directly) get.
const NotifyCooldown = time.Millisecond

// ClientConfig is the River configuration of an insert-only producer client
// (no queues, never a leader): River's defaults, except MaxAttempts
// (DefaultMaxAttempts, where River's is 25), NotifyCooldown, and
// TenantHook in Hooks, which refuses a job whose tenant breaks
// jobmeta.CheckTenant. Insert-only producers that build their own River
// client should set FetchCooldown the same way (on a client that also works
// queues it is the default fetch cooldown of every queue without its own)
// and add TenantHook.
func ClientConfig(schema string, logger *slog.Logger) *river.Config {
	return &river.Config{
		Schema:        schema,
		Logger:        logger,
		FetchCooldown: NotifyCooldown,
		Hooks:         []rivertype.Hook{&TenantHook{}},
		MaxAttempts:   DefaultMaxAttempts,
	}
}

// Job is one insert request.
type Job struct {
	Args river.JobArgs
	// Service is the service that works the job's kind: the job goes to
	// one of its queues.
	Service *service.Service
	Tier    tiers.Tier
	// Tenant is who the job runs for (the user id), kept in the job's
	// metadata (jobmeta.Tenant). Empty leaves it out. Insert refuses one
	// that breaks jobmeta.CheckTenant (over 200 bytes, not UTF-8, or with
	// a control character).
	Tenant    string
	Scheduled bool
	// MaxAttempts, when positive, is the job's max_attempts. Otherwise the
	// kind's own applies (service.MaxAttempts), and without one the
	// client's default (DefaultMaxAttempts with ClientConfig).
	MaxAttempts int
}

// Inserted is what Insert did.
type Inserted struct {
	// Job is the new job, or the queued duplicate (after any upgrade).
	Job *rivertype.JobRow
	// Duplicate is true when an equal job was already queued or running.
	Duplicate bool
	// Upgraded is true when that duplicate was moved to this insert's queue
	// and priority; FromQueue is the queue it was moved from.
	Upgraded  bool
	FromQueue string
}

// TierFields is implemented by args types that keep the tier and the tenant
// in fields of their own as well, as tierq's first releases required of
// every producer (the reference app's kinds do, for workers and producers in
// other languages that read them there). Insert inserts WithTier's copy of
// such args. A team's own args need not implement it: the tier and the
// tenant are in the job's metadata (package jobmeta).
type TierFields interface {
	WithTier(tier tiers.Tier, tenant string) river.JobArgs
}

// Insert inserts job in tx: into job.Service's queue for job.Tier
// (Service.KindInsertOpts: the kind's MaxAttempts too, when it declares
// one), with the tier and the tenant in its metadata and River's unique
// options (UniqueOpts). When an equal job is already queued
// for a worse place, that job moves up (see the package doc), and takes
// job.Tenant when set: it now runs at this insert's tier, so in this
// tenant's fair share (package fairshare), even when it was held in
// another tenant's line. A duplicate that does not move the job gets it as
// it is, held or not, in its own tenant's line. A new job available at once
// is announced to the queue's workers with River's insert notification
// whatever the client's rate limit (NotifyInsert). The caller commits.
//
// A job.Tenant that breaks jobmeta.CheckTenant is refused before anything
// is sent to the database, with an error that matches
// jobmeta.ErrInvalidTenant, whatever the client's hooks.
//
// Daily quotas (package limits): a job with a tenant is charged against
// the tenant's daily quota for job.Service (its override, else job.Tier's
// default as the scheduler recorded it), in tx (limits.Charge): the count
// commits or rolls back with the job, and holds the tenant's count locked
// until tx ends, so inserts racing for the last places never overshoot.
// Once the tenant's jobs inserted today (UTC, the transaction's clock)
// have reached the quota, Insert inserts nothing and returns an error
// wrapping a *limits.QuotaError (errors.As: the tenant, the quota and when
// it resets; errors.Is limits.ErrQuotaExceeded); tx stays usable, the
// refused job's insert rolled back to a savepoint. A duplicate of a
// queued or running job (River's uniqueness) is not counted, and is
// answered as usual even at the quota: it inserts nothing. A job without a
// tenant is not counted. The price: one statement per insert with a
// tenant (two primary-key probes; with a quota, a counter row updated),
// and, at the quota, the savepoint's two.
func Insert(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, job Job) (Inserted, error) {
	if job.Service == nil {
		return Inserted{}, fmt.Errorf("insert %s job: no service", job.Args.Kind())
	}
	if err := jobmeta.CheckTenant(job.Tenant); err != nil {
		return Inserted{}, fmt.Errorf("insert %s job: %w", job.Args.Kind(), err)
	}
	if tf, ok := job.Args.(TierFields); ok {
		job.Args = tf.WithTier(job.Tier, job.Tenant)
	}
	opts := job.Service.KindInsertOpts(job.Args.Kind(), job.Tier, job.Tenant, job.Scheduled)
	opts.UniqueOpts = UniqueOpts()
	if job.MaxAttempts > 0 {
		opts.MaxAttempts = job.MaxAttempts
	}
	charged, err := limits.Charge(ctx, tx, limits.Job{Service: job.Service.Name(), Tier: job.Tier, Tenant: job.Tenant})
	var quotaErr *limits.QuotaError
	switch {
	case errors.As(err, &quotaErr):
		return insertAtQuota(ctx, client, tx, job, opts, quotaErr)
	case err != nil:
		return Inserted{}, fmt.Errorf("insert %s job: %w", job.Args.Kind(), err)
	}
	res, err := client.InsertTx(ctx, tx, job.Args, opts)
	if err != nil {
		// The caller rolls back; for one that commits anyway the count is
		// given back (which fails, harmlessly, in a transaction the error
		// aborted: nothing of it commits).
		_ = limits.Refund(ctx, tx, charged)
		return Inserted{}, fmt.Errorf("insert %s job: %w", job.Args.Kind(), err)
	}
	if !res.UniqueSkippedAsDuplicate {
		if res.Job.State == rivertype.JobStateAvailable {
			if err := NotifyInsert(ctx, tx, res.Job.Queue); err != nil {
				return Inserted{}, err
			}
		}
		return Inserted{Job: res.Job}, nil
	}
	// A dedup hit inserted nothing: it does not count.
	if err := limits.Refund(ctx, tx, charged); err != nil {
		return Inserted{}, fmt.Errorf("insert %s job: %w", job.Args.Kind(), err)
	}
	return duplicate(ctx, tx, job, opts, res)
}

// insertAtQuota is Insert for a job whose tenant has reached its daily
// quota (quotaErr): the insert runs in a savepoint, kept when River finds
// a duplicate (which inserts nothing, and is answered as usual), rolled
// back otherwise, and then the error wraps quotaErr.
func insertAtQuota(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, job Job, opts *river.InsertOpts, quotaErr *limits.QuotaError) (Inserted, error) {
	savepoint, err := tx.Begin(ctx)
	if err != nil {
		return Inserted{}, fmt.Errorf("insert %s job: %w", job.Args.Kind(), err)
	}
	res, err := client.InsertTx(ctx, savepoint, job.Args, opts)
	if err != nil {
		_ = savepoint.Rollback(ctx) // the error is the insert's
		return Inserted{}, fmt.Errorf("insert %s job: %w", job.Args.Kind(), err)
	}
	if !res.UniqueSkippedAsDuplicate {
		if err := savepoint.Rollback(ctx); err != nil {
			return Inserted{}, fmt.Errorf("insert %s job: roll the refused job back: %w", job.Args.Kind(), err)
		}
		return Inserted{}, fmt.Errorf("insert %s job: %w", job.Args.Kind(), quotaErr)
	}
	if err := savepoint.Commit(ctx); err != nil {
		return Inserted{}, fmt.Errorf("insert %s job: %w", job.Args.Kind(), err)
	}
	return duplicate(ctx, tx, job, opts, res)
}

// duplicate is Insert's answer to an insert River found a duplicate of
// (res): the queued job, moved up when this insert's tier places it better
// (see the package doc).
func duplicate(ctx context.Context, tx pgx.Tx, job Job, opts *river.InsertOpts, res *rivertype.JobInsertResult) (Inserted, error) {
	out := Inserted{Job: res.Job, Duplicate: true}
	_, toClass, _ := routing.ClassOf(opts.Queue) // not ClassFor: that counts an unknown tier twice
	if !better(toClass, opts.Priority, res.Job.Queue, res.Job.Priority) {
		return out, nil
	}
	// The duplicate moves inside its own service's queues: River found it
	// by kind and unique args, and a kind belongs to one service.
	moved, err := escalation.Escalate(ctx, tx, job.Service.Queues(), escalation.Request{
		JobID:    res.Job.ID,
		To:       toClass,
		Priority: opts.Priority,
		Actor:    escalation.ActorDedup,
		Reason:   fmt.Sprintf("duplicate inserted for tier %s", job.Tier),
	})
	switch {
	case errors.Is(err, escalation.ErrNotQueued), errors.Is(err, escalation.ErrNotServiceQueue):
		return out, nil // started in the meantime, or not ours to move: the job stands
	case err != nil:
		return Inserted{}, err
	}
	out.Upgraded, out.FromQueue = moved.Changed, moved.FromQueue
	if moved.Changed {
		// The job now runs for this tier: its metadata says so, and its args
		// too, so that the work it chains (a follow-up job) is routed for
		// this tier. The row is still locked by the move in tx.
		_, err := tx.Exec(ctx, `
			UPDATE `+riverschema.JobTable+`
			SET args = CASE WHEN jsonb_typeof(args) = 'object' AND args ? 'tier'
			                THEN jsonb_set(args, '{tier}', to_jsonb($2::text)) ELSE args END,
			    metadata = CASE WHEN jsonb_typeof(metadata) = 'object'
			                    THEN metadata || jsonb_build_object('`+jobmeta.Tier+`', $2::text)
			                         || CASE WHEN $3::text <> '' THEN jsonb_build_object('`+jobmeta.Tenant+`', $3::text) ELSE '{}'::jsonb END
			                    ELSE metadata END
			WHERE id = $1`,
			res.Job.ID, job.Tier.String(), job.Tenant)
		if err != nil {
			return Inserted{}, fmt.Errorf("record upgraded tier: %w", err)
		}
	}
	out.Job.Queue, out.Job.Priority = moved.ToQueue, moved.ToPriority
	return out, nil
}

// notifySQL sends River's insert notification for a queue: the channel
// and payload ($1, riverschema.InsertPayload) River's driver sends
// (riverpgxv5's PGNotifyMany), so that PostgreSQL, which delivers equal
// notifications of one transaction once, delivers one when River's limiter
// let its own through in the same transaction.
const notifySQL = `SELECT pg_notify(` + riverschema.InsertChannelSQL + `, $1)`

// NotifyInsert sends River's insert notification for queue in tx: when tx
// commits, the workers of queue that listen fetch at once.
//
// River sends one itself on insert, but rate-limited per client and queue
// (the client's FetchCooldown, NotifyCooldown here): an insert less than a
// cooldown after the client's previous notification of its queue sends
// none, and nothing is sent for it later. Its transaction may then commit
// after the fetch the earlier notification caused, and its job waits for
// the next insert's notification, or for the queue's poll (250 ms on the
// priority queues) after the last insert of a burst. Insert calls
// NotifyInsert for every job it inserts available, so a job inserted
// through it never waits for that (TestEveryInsertNotifies). The price:
// one statement per insert, and every insert's commit takes PostgreSQL's
// notification lock, which serialises the commits of notifying
// transactions (measured with 16 concurrent producers: docs/benchmarks.md,
// isolation). Teams that insert with their own River client and care
// about pickup latency call it after InsertTx the same way.
func NotifyInsert(ctx context.Context, tx pgx.Tx, queue string) error {
	if _, err := tx.Exec(ctx, notifySQL, riverschema.InsertPayload(queue)); err != nil {
		return fmt.Errorf("notify insert into %s: %w", queue, err)
	}
	return nil
}

// classRank orders classes by how soon their work runs.
var classRank = map[routing.Class]int{routing.Scheduled: 0, routing.Default: 1, routing.Priority: 2}

// better reports whether class and priority place a job ahead of where the
// job in queue at priority is now.
func better(class routing.Class, priority int, queue string, currentPriority int) bool {
	_, current, ok := routing.ClassOf(queue)
	if !ok {
		return false
	}
	if classRank[class] != classRank[current] {
		return classRank[class] > classRank[current]
	}
	return priority < currentPriority
}
