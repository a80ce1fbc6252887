package api

// The console's queue page: one queue's tenants with their running,
// available and held jobs and their fair-share weights, the top tenants by
// waiting work; the limits of the queue's service (the tiers' defaults and
// the tenants' overrides, package limits); and one tenant's limits, the
// day's use of its quota and its newest jobs in the queue (?tenant=).
//
// Tenants are fair share's keys (jobmetasql.TenantKeySQL): the tenant id,
// "" for jobs without one, a long id cut and keyed by its md5. The tenant
// parameter is such a key; present and empty, it selects the jobs without
// a tenant.
//
// Cost: the tenants' counts read the queue's running and available jobs
// through River's (state, queue, ...) index and its held jobs through
// river_job_tierq_held_idx (queue first): they follow the queue's backlog,
// never the table. A tenant's held jobs are read by its key in that index;
// its other jobs through River's index, by state and queue, filtered by
// the key, or through River's GIN index on metadata when the key is a
// tenant id (tenantJobsSQL). No index on river_job has the tenant for
// every state: for "" or a long id's key, the queue's jobs in those states
// are read, and PostgreSQL may scan the table when they are most of it
// (TestConsoleQueuePlans checks the tenant-id case only).

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

// Page sizes of the queue page.
const (
	// consoleTopTenants is how many tenants the queue page lists, by
	// waiting work.
	consoleTopTenants = 50
	// consoleTenantJobs is how many of a tenant's jobs it lists, newest
	// first.
	consoleTenantJobs = 50
	// consoleOverrides is how many of the service's overrides it lists.
	consoleOverrides = 50
)

// queueTenantsSQL counts the running, available and held jobs of each
// tenant of queue $1 and lists the $2 with the most waiting (available and
// held), with their weight (fair_share_weights, default 1), the number of
// tenants, and whether the row is one of the $2: tenant key $3 (NULL: none)
// comes too wherever it ranks, so that the page of one tenant counts the
// queue once (its own count read the queue's jobs again, by key: 80 ms of
// the 206 ms tierctl bench console measured for the largest tenant).
var queueTenantsSQL = `
WITH c AS (
    SELECT ` + jobmetasql.TenantKeySQL("j") + ` AS tenant,
           count(*) FILTER (WHERE j.state = '` + riverschema.StateRunning + `')::int AS running,
           count(*) FILTER (WHERE j.state = '` + riverschema.StateAvailable + `')::int AS available,
           0 AS held
    FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state IN ('` + riverschema.StateRunning + `', '` + riverschema.StateAvailable + `') AND j.queue = $1
    GROUP BY 1
    UNION ALL
    SELECT ` + jobmetasql.TenantKeySQL("j") + `, 0, 0, count(*)::int
    FROM ` + riverschema.JobTable + ` AS j
    WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = $1
    GROUP BY 1
), t AS (
    SELECT tenant, sum(running)::int AS running, sum(available)::int AS available, sum(held)::int AS held,
           row_number() OVER (ORDER BY sum(available) + sum(held) DESC, sum(running) DESC, tenant) AS rank,
           count(*) OVER ()::int AS tenants
    FROM c GROUP BY tenant
)
SELECT t.tenant, t.running, t.available, t.held, coalesce(w.weight, 1), t.tenants, t.rank <= $2
FROM t LEFT JOIN fair_share_weights AS w USING (tenant)
WHERE t.rank <= $2 OR t.tenant = $3::text
ORDER BY t.rank`

// tenantWeightSQL is the weight of tenant key $1 (default 1): the tenant
// page's figure for a tenant with no job running or waiting in the queue.
const tenantWeightSQL = `SELECT coalesce((SELECT weight FROM fair_share_weights WHERE tenant = $1), 1)`

// tenantJobsColumns are a job's columns as the tenant's list shows it.
var tenantJobsColumns = `j.id, j.kind, j.state::text, ` + jobmetasql.HeldSQL("j") + ` AS held, j.priority, ` +
	jobmetasql.TierSQL("j") + `, j.attempt, j.max_attempts, j.created_at, j.scheduled_at`

// tenantJobsSQL lists the newest $3 jobs of tenant key $2 in queue $1
// that have not finished: its held jobs, read through
// river_job_tierq_held_idx by its key, and its available, running,
// scheduled and retryable jobs, through River's (state, queue, ...) index
// filtered by the key, or through River's GIN index on metadata when
// byTenant (the key is a tenant id itself, $2 the tenant: not "", not a long
// id's md5 key), whichever the planner finds fewer rows in. Pending jobs fair
// share does not hold (River's own, waiting for another job) are not
// listed: reading them means reading every held job of the queue. Both
// parts are materialized before the newest are picked: with ORDER BY id
// DESC LIMIT over the table, the planner walked river_job's primary key
// backwards through every job of every queue (135 ms at 300,000 jobs for
// 3 rows, TestConsoleQueuePlans).
func tenantJobsSQL(byTenant bool) string {
	cond := `j.queue = $1 AND ` + jobmetasql.TenantKeySQL("j") + ` = $2`
	other := cond
	if byTenant {
		other += ` AND j.` + riverschema.JobMetadata + ` @> jsonb_build_object('` + jobmeta.Tenant + `', $2::text)`
	}
	return `
WITH held AS MATERIALIZED (
    SELECT ` + tenantJobsColumns + ` FROM ` + riverschema.JobTable + ` AS j
    WHERE ` + jobmetasql.HeldSQL("j") + ` AND ` + cond + `
), other AS MATERIALIZED (
    SELECT ` + tenantJobsColumns + ` FROM ` + riverschema.JobTable + ` AS j
    WHERE j.state IN ('` + riverschema.StateAvailable + `', '` + riverschema.StateRunning + `', '` + riverschema.StateScheduled + `', '` +
		riverschema.StateRetryable + `') AND ` + other + `
)
SELECT * FROM held UNION ALL SELECT * FROM other
ORDER BY id DESC LIMIT $3`
}

// queueTenant is one tenant of the queue.
type queueTenant struct {
	// Tenant is its key ("" for jobs without a tenant).
	Tenant                   string
	Running, Available, Held int
	Weight                   int
}

// Waiting is the tenant's waiting work: available and held jobs.
func (t queueTenant) Waiting() int { return t.Available + t.Held }

// tenantJob is one job of the tenant's list.
type tenantJob struct {
	ID                   int64
	Kind, State          string
	Held                 bool
	Priority             int
	Tier                 string
	Attempt, MaxAttempts int
	CreatedAt            time.Time
	ScheduledAt          time.Time
}

// tenantData is the selected tenant's part of the queue page.
type tenantData struct {
	queueTenant
	// Subscription is the tenant's, as a user (nil: none, the free tier),
	// when the key is a user id.
	Subscription *subscriptions.Subscription
	// Limits are its limits in the queue's service and its quota's use
	// today, when the queue has a service and the key is a tenant id.
	Limits *limits.Tenant
	Jobs   []tenantJob
}

// queueData is the queue page.
type queueData struct {
	Queue   string
	Service string // "" for a queue of no service
	Class   string
	Paused  bool
	// Tenants are the top consoleTopTenants by waiting work; TenantCount
	// how many have running or waiting jobs.
	Tenants     []queueTenant
	TenantCount int
	Top         int
	// TierLimits are the service's limits by tier, in tiers.All's order
	// (none when no scheduler recorded them); Overrides are its tenants'
	// overrides, the first consoleOverrides by tenant.
	TierLimits    []tierLimits
	LimitsAt      time.Time
	Overrides     []limits.TenantOverride
	MoreOverrides bool
	HasTenant     bool // ?tenant= was given
	Tenant        tenantData
	TenantJobsMax int
}

// tierLimits is one tier's defaults.
type tierLimits struct {
	Tier   tiers.Tier
	Limits limits.Values
}

func (s *Server) consoleQueue(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("queue")
	known, err := queuestats.KnownQueues(ctx, s.pool, s.cfg.Registry.Queues())
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	if !slices.Contains(known, name) {
		s.consoleError(w, r, http.StatusNotFound, "No such queue: the known queues are the services' queues, scheduler, and those River clients registered.")
		return
	}
	data := queueData{Queue: name, Top: consoleTopTenants, TenantJobsMax: consoleTenantJobs}
	if svc, class, ok := s.cfg.Registry.ForQueue(name); ok {
		data.Service, data.Class = svc.Name(), class.String()
	}
	paused, err := queuestats.Paused(ctx, s.pool)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	_, data.Paused = paused[name]

	q := r.URL.Query()
	data.HasTenant = q.Has("tenant")
	var key *string // the selected tenant's key, counted with the others
	if data.HasTenant {
		k := q.Get("tenant")
		key, data.Tenant.Tenant = &k, k
	}
	rows, err := s.pool.Query(ctx, queueTenantsSQL, name, consoleTopTenants, key)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	var (
		qt    queueTenant
		top   bool
		found bool // the selected tenant has jobs running or waiting here
	)
	if _, err := pgx.ForEachRow(rows, []any{&qt.Tenant, &qt.Running, &qt.Available, &qt.Held, &qt.Weight, &data.TenantCount, &top}, func() error {
		if key != nil && qt.Tenant == *key {
			data.Tenant.queueTenant, found = qt, true
		}
		if top {
			data.Tenants = append(data.Tenants, qt)
		}
		return nil
	}); err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	if key != nil && !found {
		if err := s.pool.QueryRow(ctx, tenantWeightSQL, *key).Scan(&data.Tenant.Weight); err != nil {
			s.consoleInternal(w, r, err)
			return
		}
	}

	if data.Service != "" {
		rec, ok, err := limits.ReadService(ctx, s.pool, data.Service)
		if err != nil {
			s.consoleInternal(w, r, err)
			return
		}
		if ok {
			data.LimitsAt = rec.RecordedAt
			for _, tier := range tiers.All() {
				data.TierLimits = append(data.TierLimits, tierLimits{Tier: tier, Limits: rec.Tiers[tier]})
			}
		}
		overrides, err := limits.ListOverrides(ctx, s.pool, limits.ListParams{Service: data.Service, Limit: consoleOverrides + 1})
		if err != nil {
			s.consoleInternal(w, r, err)
			return
		}
		if len(overrides) > consoleOverrides {
			overrides, data.MoreOverrides = overrides[:consoleOverrides], true
		}
		data.Overrides = overrides
	}

	page := consolePage{Title: "Queue " + name, Nav: "overview", Data: &data}
	if data.HasTenant {
		if err := s.readTenant(r, &data); err != nil {
			s.consoleInternal(w, r, err)
			return
		}
	}
	s.render(w, r, http.StatusOK, "queue", page)
}

// readTenant reads the selected tenant's subscription, limits and newest
// jobs in data's queue (its counts and weight come with the others').
func (s *Server) readTenant(r *http.Request, data *queueData) error {
	ctx := r.Context()
	t := &data.Tenant
	key := t.Tenant
	// A key that is a tenant id (not "", not a long id's md5 key) is a
	// user id too: its subscription and its limits.
	if key != "" && jobmeta.CheckTenant(key) == nil {
		sub, ok, err := subscriptions.Get(ctx, s.pool, key)
		if err != nil {
			return err
		}
		tier := tiers.Free
		if ok {
			t.Subscription, tier = &sub, sub.Tier
		}
		if data.Service != "" {
			l, err := limits.Lookup(ctx, s.pool, data.Service, tier, key, time.Time{})
			if err != nil && !errors.Is(err, limits.ErrInvalid) {
				return err
			}
			if err == nil {
				t.Limits = &l
			}
		}
	}
	byTenant := key != "" && len(key) <= jobmeta.MaxTenantBytes
	rows, err := s.pool.Query(ctx, tenantJobsSQL(byTenant), data.Queue, key, consoleTenantJobs)
	if err != nil {
		return err
	}
	var j tenantJob
	_, err = pgx.ForEachRow(rows, []any{&j.ID, &j.Kind, &j.State, &j.Held, &j.Priority, &j.Tier, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &j.ScheduledAt}, func() error {
		t.Jobs = append(t.Jobs, j)
		return nil
	})
	return err
}

// jobState is a job's state as the console shows it: "held" for a pending
// job fair share holds back.
func jobState(state string, held bool) string {
	if held {
		return "held"
	}
	return state
}

// tenantLabel is a tenant key as the pages show it.
func tenantLabel(key string) string {
	if key == "" {
		return "(no tenant)"
	}
	return key
}

// formatLimit is a limit as the pages show it: "none" for 0 (no limit),
// "inherits" for an override's unset (nil) field, else its value.
func formatLimit(v any) string {
	switch v := v.(type) {
	case *int:
		if v == nil {
			return "inherits"
		}
		return formatLimit(*v)
	case *int64:
		if v == nil {
			return "inherits"
		}
		return formatLimit(*v)
	case *limits.Rate:
		if v == nil {
			return "inherits"
		}
		return formatLimit(*v)
	case int:
		if v == 0 {
			return "none"
		}
		return strconv.Itoa(v)
	case int64:
		if v == 0 {
			return "none"
		}
		return strconv.FormatInt(v, 10)
	case limits.Rate:
		if v.IsZero() {
			return "none"
		}
		return v.String()
	}
	return fmt.Sprint(v)
}
