package bench

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/producer"
)

// ConsoleResult is the console scenario: the operator console's pages
// (package api, /console/) timed over HTTP against an API server running
// in the bench (api.New on the scenario's schema, as cmd/api serves it),
// beside Jobs river_job rows and DeadLetters dead letters. Each page is
// requested Requests times in a row; its time is the median, from the
// request's start to the last byte of the answer, and Max is its slowest
// (the first request of the overview reads the database, the others share
// its metrics read for api.MetricsCacheFor).
type ConsoleResult struct {
	Jobs        int `json:"jobs"`
	Held        int `json:"held"`
	Tenants     int `json:"tenants"`
	DeadLetters int `json:"dead_letters"`
	Escalations int `json:"escalations"`
	Requests    int `json:"requests"`
	// SeedSeconds is how long the rows took to write, indexes and ANALYZE
	// included.
	SeedSeconds float64       `json:"seed_seconds"`
	Pages       []ConsolePage `json:"pages"`
}

// ConsolePage is one page's timing.
type ConsolePage struct {
	Name     string  `json:"name"`
	Path     string  `json:"path"`
	MedianMs float64 `json:"median_ms"`
	MaxMs    float64 `json:"max_ms"`
	Bytes    int     `json:"bytes"`
	// Failures counts the requests not answered 200 (their times count
	// too); Error is the first one's answer. A page that failed misses its
	// target whatever its time.
	Failures int    `json:"failures,omitempty"`
	Error    string `json:"error,omitempty"`
}

// consoleTargetMs is every page's target (issue 34).
const consoleTargetMs = 300

// consoleToken is the bench API's admin token (the Basic auth password).
const consoleToken = "bench-console-admin-token"

// The tenant whose jobs and dead letters the filtered pages ask for: the
// largest, a fifth of every row (consoleSeedSQL), the costliest to count.
const consoleBigTenant = "tenant_big"

// The statements that write the scenario's rows with generate_series:
//
//   - river_job ($1 jobs over the queues $2): 60% completed, 20% held by
//     fair share (pending with jobmeta.HeldAt), 10% available, 4%
//     scheduled an hour ahead, 3% cancelled, 2% retryable, 1% running;
//     the queues in turn; a tier in turn in the metadata; a fifth of the
//     rows of consoleBigTenant, the others spread over $3 tenants;
//   - dead_letter_jobs ($1 over the queues $2 and $3 tenants): two
//     attempt errors each (one in 1,000 ends "disk full"), kinds, queues,
//     tiers and tenants in turn as above, one in ten replayed;
//   - job_escalations ($1 over the queues $2), subscriptions ($1);
//   - job_wait_stats: the last hour of every queue ($1) and tier, as the
//     workers record it.
const (
	consoleJobsSQL = `
INSERT INTO ` + riverschema.JobTable + ` (state, queue, priority, kind, args, metadata, max_attempts, attempt,
                       attempted_at, created_at, scheduled_at, finalized_at, errors)
SELECT s.state::river_job_state, ($2::text[])[1 + i % cardinality($2::text[])], 1 + i % 4, 'analysis',
       jsonb_build_object('target', '/bench/' || i),
       jsonb_build_object('` + jobmeta.Tier + `', (ARRAY['free', 'pro', 'pro_plus', 'enterprise'])[1 + i % 4],
                          '` + jobmeta.Tenant + `', CASE WHEN i % 5 = 0 THEN '` + consoleBigTenant + `' ELSE 'tenant_' || (i % $3) END)
         || CASE WHEN s.state = 'pending' THEN jsonb_build_object('` + jobmeta.HeldAt + `', now()) ELSE '{}' END,
       25, CASE WHEN s.state IN ('available', 'pending', 'scheduled') THEN 0 ELSE 1 END,
       CASE WHEN s.state IN ('available', 'pending', 'scheduled') THEN NULL ELSE now() - interval '1 minute' END,
       now() - interval '2 hours' + make_interval(secs => i % 3600),
       CASE WHEN s.state = 'scheduled' THEN now() + interval '1 hour' ELSE now() - interval '1 hour' + make_interval(secs => i % 3600) END,
       CASE WHEN s.state IN ('completed', 'cancelled') THEN now() - interval '30 seconds' END,
       CASE WHEN s.state = 'retryable' THEN ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'timeout', 'trace', '')] ELSE '{}' END
FROM generate_series(1, $1) AS i,
     LATERAL (SELECT CASE WHEN i % 100 < 60 THEN 'completed' WHEN i % 100 < 80 THEN 'pending'
                          WHEN i % 100 < 90 THEN 'available' WHEN i % 100 < 94 THEN 'scheduled'
                          WHEN i % 100 < 97 THEN 'cancelled' WHEN i % 100 < 99 THEN 'retryable'
                          ELSE 'running' END AS state) AS s`

	consoleDeadLettersSQL = `
INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, metadata, errors, attempt, max_attempts,
                              created_at, finalized_at, moved_at, replayed_at, replay_job_id, replayed_by)
SELECT 100000000 + i, (ARRAY['analysis', 'specview', 'loadtest'])[1 + i % 3], ($2::text[])[1 + i % cardinality($2::text[])], 1 + i % 4,
       jsonb_build_object('target', '/bench/dead/' || i),
       jsonb_build_object('` + jobmeta.Tier + `', (ARRAY['free', 'pro', 'pro_plus', 'enterprise'])[1 + i % 4],
                          '` + jobmeta.Tenant + `', CASE WHEN i % 5 = 0 THEN '` + consoleBigTenant + `' ELSE 'tenant_' || (i % $3) END),
       jsonb_build_array(jsonb_build_object('at', now() - interval '2 hours', 'attempt', 1, 'error', 'upstream timeout after 30s (job ' || i || ')', 'trace', ''),
                         jsonb_build_object('at', now() - interval '1 hour', 'attempt', 2,
                                            'error', CASE WHEN i % 1000 = 0 THEN 'disk full' ELSE 'upstream refused: 503' END, 'trace', '')),
       2, 2, now() - interval '3 hours', now() - interval '1 hour', now() - make_interval(secs => $1 - i),
       CASE WHEN i % 10 = 0 THEN now() END, CASE WHEN i % 10 = 0 THEN 200000000 + i END, CASE WHEN i % 10 = 0 THEN 'bench' END
FROM generate_series(1, $1) AS i`

	consoleEscalationsSQL = `
INSERT INTO job_escalations (job_id, from_queue, to_queue, from_priority, to_priority, actor, reason, escalated_at)
SELECT i, ($2::text[])[1 + i % cardinality($2::text[])], ($2::text[])[1 + (i + 1) % cardinality($2::text[])], 4, 1,
       CASE WHEN i % 2 = 0 THEN 'escalation-sweep' ELSE 'alice' END, 'waited too long', now() - make_interval(secs => $1 - i)
FROM generate_series(1, $1) AS i`

	consoleSubscriptionsSQL = `
INSERT INTO subscriptions (user_id, tier)
SELECT 'tenant_' || i, (ARRAY['free', 'pro', 'pro_plus', 'enterprise'])[1 + i % 4] FROM generate_series(1, $1) AS i`

	consoleWaitStatsSQL = `
INSERT INTO job_wait_stats (minute, queue, tier, counts)
SELECT date_trunc('minute', now()) - make_interval(mins => m), q, t,
       (SELECT array_agg(CASE WHEN b BETWEEN 20 AND 40 THEN (b * 7 + m) % 50 ELSE 0 END::bigint) FROM generate_series(1, 82) AS b)
FROM generate_series(0, 59) AS m, unnest($1::text[]) AS q, unnest(ARRAY['free', 'pro', 'pro_plus', 'enterprise']) AS t`
)

// Console runs the console scenario.
func Console(ctx context.Context, opts Options) (ConsoleResult, error) {
	sz := opts.sizes()
	res := ConsoleResult{
		Jobs: sz.consoleJobs, Held: sz.consoleJobs / 5, Tenants: sz.consoleTenants + 1, DeadLetters: sz.consoleDeadLetters,
		Escalations: sz.consoleDeadLetters / 2, Requests: sz.consoleRequests,
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return res, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return res, err
	}
	defer e.close()
	queues := opts.Registry.Queues()

	opts.progress().Stage(fmt.Sprintf("console: seeding %d jobs and %d dead letters", res.Jobs, res.DeadLetters), 0)
	start := time.Now()
	for _, st := range []struct {
		table string
		sql   string
		args  []any
	}{
		{riverschema.JobTable, consoleJobsSQL, []any{res.Jobs, queues, sz.consoleTenants}},
		{"dead_letter_jobs", consoleDeadLettersSQL, []any{res.DeadLetters, queues, sz.consoleTenants}},
		{"job_escalations", consoleEscalationsSQL, []any{res.Escalations, queues}},
		{"subscriptions", consoleSubscriptionsSQL, []any{sz.consoleTenants}},
		{"job_wait_stats", consoleWaitStatsSQL, []any{queues}},
	} {
		if _, err := e.Pool.Exec(ctx, st.sql, st.args...); err != nil {
			return res, fmt.Errorf("seed %s: %w", st.table, err)
		}
	}
	// As autovacuum leaves a table: statistics, and the visibility map
	// that index-only scans read.
	for _, table := range []string{riverschema.JobTable, "dead_letter_jobs", "job_escalations", "subscriptions", "job_wait_stats"} {
		if _, err := e.Pool.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
			return res, fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	res.SeedSeconds = round(time.Since(start).Seconds(), 1)

	base, stop, err := startConsoleAPI(ctx, e, opts)
	if err != nil {
		return res, err
	}
	defer stop()

	var heldJob, deadLetter int64
	if err := e.Pool.QueryRow(ctx, `SELECT max(id) FROM `+riverschema.JobTable+` WHERE state = 'pending'`).Scan(&heldJob); err != nil {
		return res, fmt.Errorf("pick a held job: %w", err)
	}
	if err := e.Pool.QueryRow(ctx, `SELECT id FROM dead_letter_jobs ORDER BY id OFFSET $1 LIMIT 1`, res.DeadLetters/2).Scan(&deadLetter); err != nil {
		return res, fmt.Errorf("pick a dead letter: %w", err)
	}
	queue := opts.Service.Queues()[0]
	pages := []ConsolePage{
		{Name: "overview", Path: "/console/"},
		{Name: "queue", Path: "/console/queues/" + url.PathEscape(queue)},
		{Name: "queue_tenant", Path: "/console/queues/" + url.PathEscape(queue) + "?tenant=" + consoleBigTenant},
		{Name: "queue_small_tenant", Path: "/console/queues/" + url.PathEscape(queue) + "?tenant=tenant_7"},
		{Name: "job", Path: "/console/jobs/" + strconv.FormatInt(heldJob, 10)},
		{Name: "dead_letters", Path: "/console/dead-letters"},
		{Name: "dead_letters_queue", Path: "/console/dead-letters?queue=" + url.QueryEscape(queue)},
		{Name: "dead_letters_kind", Path: "/console/dead-letters?kind=specview"},
		{Name: "dead_letters_tier", Path: "/console/dead-letters?tier=enterprise"},
		{Name: "dead_letters_tenant", Path: "/console/dead-letters?tenant=" + consoleBigTenant},
		{Name: "dead_letters_small_tenant", Path: "/console/dead-letters?tenant=tenant_7"},
		{Name: "dead_letters_error", Path: "/console/dead-letters?error=upstream+refused"},
		{Name: "dead_letters_rare_error", Path: "/console/dead-letters?error=disk+full"},
		{Name: "dead_letters_pending", Path: "/console/dead-letters?state=pending"},
		{Name: "dead_letters_replayed", Path: "/console/dead-letters?state=replayed"},
		{Name: "dead_letters_all_filters", Path: "/console/dead-letters?queue=" + url.QueryEscape(queue) + "&tier=pro&tenant=" + consoleBigTenant + "&state=pending"},
		{Name: "dead_letter", Path: "/console/dead-letters/" + strconv.FormatInt(deadLetter, 10)},
		{Name: "bulk_replay_confirm_tenant", Path: "/console/dead-letters/replay?tenant=tenant_7"},
		{Name: "bulk_replay_confirm_big_tenant", Path: "/console/dead-letters/replay?tenant=" + consoleBigTenant},
		{Name: "bulk_replay_confirm_all", Path: "/console/dead-letters/replay"},
		{Name: "escalations", Path: "/console/escalations"},
		{Name: "escalations_actor", Path: "/console/escalations?actor=alice"},
		{Name: "subscriptions", Path: "/console/subscriptions"},
		{Name: "subscriptions_user", Path: "/console/subscriptions?user=tenant_7"},
	}
	client := &http.Client{Timeout: time.Minute}
	opts.progress().Stage("console: timing pages", len(pages)*res.Requests)
	for k := range pages {
		p := &pages[k]
		var times []float64
		for range res.Requests {
			ms, n, err := consoleGet(ctx, client, base+p.Path)
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if err != nil {
				if p.Failures++; p.Error == "" {
					p.Error = err.Error()
				}
			} else {
				p.Bytes = n
			}
			times = append(times, ms)
			opts.progress().Add(1)
		}
		p.MedianMs, p.MaxMs = round(median(times), 1), round(slices.Max(times), 1)
	}
	res.Pages = pages
	return res, nil
}

// consoleGet requests url as an operator and returns how long the answer
// took to its last byte, in ms, and its size; an answer other than 200 is
// an error, with its time.
func consoleGet(ctx context.Context, client *http.Client, url string) (float64, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	req.SetBasicAuth("bench", consoleToken)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return float64(time.Since(start).Microseconds()) / 1000, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	elapsed := float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		return elapsed, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return elapsed, 0, fmt.Errorf("%s: %s", resp.Status, consoleProblem(body))
	}
	return elapsed, len(body), nil
}

// startConsoleAPI serves the API (the console within it) on a loopback
// port, on a pool of its own on the scenario's schema (as the API process
// has), and returns its base URL and how to stop it.
func startConsoleAPI(ctx context.Context, e *env, opts Options) (string, func(), error) {
	pool, err := e.pool(ctx, 4)
	if err != nil {
		return "", nil, err
	}
	logger := opts.logger()
	client, err := river.NewClient(riverpgxv5.New(pool), producer.ClientConfig(e.Name, logger))
	if err != nil {
		pool.Close()
		return "", nil, fmt.Errorf("new river client: %w", err)
	}
	server := api.New(api.Config{
		Token: "bench-console-producer-token", AdminToken: consoleToken, Schema: e.Name, Registry: opts.Registry, Logger: logger,
	}, pool, client, api.NewMetrics(pool, opts.Registry, logger))
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return "", nil, fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: server.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	stop := func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			logger.Warn("bench: stop the console's API", slog.String("error", err.Error()))
		}
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("bench: the console's API", slog.String("error", err.Error()))
		}
		pool.Close()
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// consoleProblemRE finds the message of the console's error page.
var consoleProblemRE = regexp.MustCompile(`<p class="error" role="alert">([^<]*)</p>`)

// consoleProblem is the message of an error page, or its first bytes.
func consoleProblem(body []byte) string {
	if m := consoleProblemRE.FindSubmatch(body); m != nil {
		return html.UnescapeString(string(m[1]))
	}
	return fmt.Sprintf("%.200s", body)
}
