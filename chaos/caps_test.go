//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/service"
)

// Concurrency caps in the scenarios that run with them on (worker-crash,
// scheduler-failover): the capped services cap free tenants at freeCap jobs
// running at once, through the schedulers' environment as production sets
// it (<NAME>_FREE_TENANT_MAX_RUNNING; a scheduler records it in
// tier_limits when it starts, and every process reads the table), and
// capOverrideTenant has an operator's override of overrideCap, set with
// tierctl, which beats its tier's default whatever the tier: its jobs of
// every tier count against it, and its free jobs may run overrideCap at
// once.
const (
	freeCap     = 3
	overrideCap = 4
)

// capOverrideTenant is the load tenant with an override.
var capOverrideTenant = loadTenants[0]

// capTenants sets the caps of services for the schedulers started from
// now on. Call it before the first scheduler starts; setOverrides once they
// started (the services are recorded) and before the load.
func (s *system) capTenants(services ...*service.Service) {
	s.capped = services
	for _, svc := range services {
		s.schedulerExtraEnv = append(s.schedulerExtraEnv, fmt.Sprintf("%sFREE_TENANT_MAX_RUNNING=%d", svc.EnvPrefix(), freeCap))
	}
}

// setOverrides gives capOverrideTenant its override in every capped
// service, with tierctl, and checks that the schedulers recorded the free
// tier's cap.
func (s *system) setOverrides(ctx context.Context) {
	s.t.Helper()
	for _, svc := range s.capped {
		s.tierctl("limits", "set", svc.Name(), capOverrideTenant, "--max-running", strconv.Itoa(overrideCap))
		var recorded int
		require.NoError(s.t, s.pool.QueryRow(ctx, `SELECT max_running FROM tier_limits WHERE service = $1 AND tier = 'free'`,
			svc.Name()).Scan(&recorded), "the free tier's cap of %s, recorded by the scheduler", svc.Name())
		require.Equal(s.t, freeCap, recorded, "the free tier's cap of %s, recorded by the scheduler", svc.Name())
	}
}

// capCheck is what the jobs' own execution records say of the caps.
type capCheck struct {
	// runs is how many executions of jobs counted against a cap (marked
	// jobmeta.Capped) the check looked at; killedRuns those of them a
	// worker's kill cut short.
	runs, killedRuns int
	// freePeak and overridePeak are the most executions of one tenant of
	// one service at any instant: of the free-capped tenants, and of
	// capOverrideTenant.
	freePeak, overridePeak int
	// exceeded counts executions that started while their tenant already
	// ran its cap of them in the service, a killed worker's cut short at
	// the kill: a cap broken. Must be 0.
	exceeded int
	// exceededByKilled counts executions that started while their tenant
	// ran its cap only counting, as the database does, a killed worker's
	// cut-short executions as running until the rescuer moved their jobs
	// (docs/fairness.md, "Concurrency caps": a killed worker's job counts
	// until River rescues it, so this stays 0 unless that changes).
	exceededByKilled int
	// unmarked counts executions of jobs that should count against a cap
	// (capOverrideTenant's, the other tenants' free jobs) but carry no mark,
	// and marked ones that should not. Must be 0.
	unmarked int
}

// capRun is one recorded execution of a load-test job of a tenant.
type capRun struct {
	service, tenant string
	start, end      time.Time
	// cut: the execution's worker was killed before it ended; killedAt is
	// when.
	cut      bool
	killedAt time.Time
}

// checkCaps reads the executions of every recorded load-test job the
// scenario inserted and checks the caps against them: per service and
// tenant, the most executions running at any instant. An execution runs
// from its started_at to its completed_at, or, when it has none, to the
// time of its attempt's error (River's record of the attempt ending: the
// job's error, or the rescuer's for a killed worker's job). A killed
// worker's execution ended at the kill (killed: each killed worker's River
// client id and when); the database counts it against the cap until the
// rescuer moves it, which exceededByKilled measures.
func (s *system) checkCaps(ctx context.Context, killed map[string]time.Time) capCheck {
	s.t.Helper()
	var ids []int64
	for _, e := range s.ledger.all() {
		if e.recorded {
			ids = append(ids, e.id)
		}
	}
	rows, err := s.pool.Query(ctx, `
		WITH j AS (
			SELECT id, queue, metadata, to_jsonb(errors) AS errors FROM river_job WHERE id = ANY($1)
			UNION ALL
			SELECT job_id, queue, metadata, errors FROM dead_letter_jobs WHERE job_id = ANY($1))
		SELECT j.queue, j.metadata->>$2, j.metadata->>$3, j.metadata->>$4, e.client_id, e.started_at,
		       coalesce(e.completed_at, (SELECT max((x->>'at')::timestamptz) FROM jsonb_array_elements(j.errors) AS x
		                                 WHERE (x->>'attempt')::int = e.attempt))
		FROM load_test_executions AS e JOIN j ON j.id = e.job_id
		WHERE j.metadata ? $2`, ids, jobmeta.Tenant, jobmeta.Tier, jobmeta.Capped)
	require.NoError(s.t, err)
	var (
		c    capCheck
		runs []capRun
	)
	for rows.Next() {
		var (
			queue, tenant, client string
			tier, capped          *string
			start                 time.Time
			end                   *time.Time
		)
		require.NoError(s.t, rows.Scan(&queue, &tenant, &tier, &capped, &client, &start, &end))
		svc, _, ok := s.registry.ForQueue(queue)
		require.True(s.t, ok, "a recorded job in queue %s, of no service", queue)
		cappedService := slices.ContainsFunc(s.capped, func(c *service.Service) bool { return c.Name() == svc.Name() })
		want := cappedService && (tenant == capOverrideTenant || tier == nil || *tier == "free")
		if want != (capped != nil) {
			c.unmarked++
		}
		if capped == nil {
			continue
		}
		require.NotNil(s.t, end, "an execution of a %s job of %s with no end (no completion, no error for its attempt)", *capped, tenant)
		r := capRun{service: *capped, tenant: tenant, start: start, end: *end}
		if at, ok := killed[client]; ok && !r.end.Before(at) {
			r.cut, r.killedAt = true, at
			c.killedRuns++
		}
		runs = append(runs, r)
	}
	require.NoError(s.t, rows.Err())
	c.runs = len(runs)

	// One sweep per view: ends before starts at the same instant (a job
	// admitted as another's completion commits starts after it).
	type event struct {
		at    time.Time
		delta int
		cut   bool
	}
	type key struct{ service, tenant string }
	byKey := map[key][]capRun{}
	for _, r := range runs {
		k := key{r.service, r.tenant}
		byKey[k] = append(byKey[k], r)
	}
	for k, rs := range byKey {
		limit := freeCap
		if k.tenant == capOverrideTenant {
			limit = overrideCap
		}
		sweep := func(cutAtKill bool) (peak, over int) {
			var events []event
			for _, r := range rs {
				end := r.end
				if r.cut && cutAtKill {
					end = r.killedAt
				}
				events = append(events, event{r.start, 1, r.cut}, event{end, -1, r.cut})
			}
			slices.SortFunc(events, func(a, b event) int {
				if n := a.at.Compare(b.at); n != 0 {
					return n
				}
				return a.delta - b.delta
			})
			n := 0
			for _, e := range events {
				n += e.delta
				if e.delta > 0 && n > limit {
					over++
				}
				peak = max(peak, n)
			}
			return peak, over
		}
		peak, over := sweep(true)
		_, overCounted := sweep(false)
		c.exceeded += over
		c.exceededByKilled += overCounted - over
		if limit == overrideCap {
			c.overridePeak = max(c.overridePeak, peak)
		} else {
			c.freePeak = max(c.freePeak, peak)
		}
	}
	return c
}

// requireCapsKept fails the test unless the caps held: no execution over
// its tenant's cap but for a killed worker's still counted, every job
// marked as its cap says, and some executions capped.
func (s *system) requireCapsKept(c capCheck, watch *fairShareWatch) {
	s.t.Helper()
	require.Positive(s.t, c.runs, "no execution of a capped job")
	require.Zero(s.t, c.exceeded, "executions started over their tenant's cap (free %d, %s %d; peaks %d and %d)",
		freeCap, capOverrideTenant, overrideCap, c.freePeak, c.overridePeak)
	require.Zero(s.t, c.unmarked, "executions of jobs whose cap mark is not what their tenant's caps say")
	require.LessOrEqual(s.t, c.freePeak, freeCap)
	require.LessOrEqual(s.t, c.overridePeak, overrideCap)
	require.Positive(s.t, watch.capHeldPeak, "no job was ever held by a cap")
}

// summary's figures of the caps.
func (c capCheck) figures(watch *fairShareWatch) []string {
	return []string{
		fmt.Sprintf("capped_runs=%d", c.runs),
		fmt.Sprintf("cap_peak=%d/%d", c.freePeak, freeCap),
		fmt.Sprintf("override_peak=%d/%d", c.overridePeak, overrideCap),
		fmt.Sprintf("cap_held_peak=%d", watch.capHeldPeak),
		fmt.Sprintf("cap_exceeded=%d", c.exceeded),
		fmt.Sprintf("capped_cut_by_kill=%d", c.killedRuns),
		fmt.Sprintf("cap_exceeded_by_killed=%d", c.exceededByKilled),
	}
}
