package api_test

import (
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/waitstats"
)

// TestBrowserConsole drives the operator console in a real headless
// Chromium, as an operator does: the browser answers the Basic auth
// challenge (user name "operator", the admin token), the dead-letters
// list shows the dead letters, a click opens one, and its replay form,
// filled in and submitted, replays it: the browser's own same-origin form
// POST passes the cross-origin check, and the database records the
// operator's name. Screenshots are logged, and written to
// TIERQ_SCREENSHOT_DIR when it is set (console-dead-letters.png,
// console-dead-letter.png), as TestBrowserRiverUI's.
//
// It needs Chromium, as TestBrowserRiverUI.
func TestBrowserConsole(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	testdb.SeedDiscarded(t, b.db, 6) // 1 per service queue
	drainAll(t, b.bundle)
	id := b.deadLetterIDs(t, "queue = 'analysis_default'")[0]
	shots := screenshotDirs(t)
	br := startBrowser(t, adminToken)

	br.do(t, "open the dead-letters list", chromedp.Navigate(b.url+"/console/dead-letters"))
	br.waitText(t, "the list shows the dead letters", pageText, "Dead letters", "analysis_default", "attempt 2 of job 1", "specview_priority")
	br.screenshot(t, shots, "console-dead-letters.png")

	link := `a[href="/console/dead-letters/` + id + `"]`
	form := `form[action="/console/dead-letters/` + id + `/replay"]`
	// A query waits for the new document; a poll started during the
	// navigation would lose its page.
	br.do(t, "open dead letter "+id, chromedp.Click(chromedp.CSS(link)), chromedp.WaitVisible(chromedp.CSS(form)))
	br.waitFor(t, "the dead letter's page is shown", `location.pathname === "/console/dead-letters/`+id+`"`)
	br.waitText(t, "the page shows every attempt's error and the args", pageText,
		"Attempt 1 at", "attempt 1 of job 1", "attempt 2 of job 1", `"target": "/srv/t1"`)

	br.do(t, "fill in the reason", chromedp.SendKeys(chromedp.CSS(form+` textarea[name="reason"]`), "upstream fixed, INC-42"))
	br.do(t, "submit the replay", chromedp.Click(chromedp.CSS(form+` button[type="submit"]`)),
		chromedp.WaitReady(chromedp.CSS(form+` input[name="force"]`))) // on the page after the replay
	br.waitText(t, "the page shows the replay", pageText, "by operator as job", "Replay again")
	br.screenshot(t, shots, "console-dead-letter.png")

	var (
		by    string
		jobID int64
		queue string
	)
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT replayed_by, replay_job_id FROM dead_letter_jobs WHERE id = $1`, id).Scan(&by, &jobID))
	require.Equal(t, "operator", by)
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT queue FROM river_job WHERE id = $1`, jobID).Scan(&queue))
	require.Equal(t, "analysis_default", queue)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.True(t, br.eval(t, `document.querySelector('a[href="/riverui/jobs/`+strconv.FormatInt(jobID, 10)+`"]') != null`), "the new job links to River UI")
	require.Contains(t, b.log.String(), `"msg":"console action","action":"replay","actor":"operator","dead_letter_id":`+id)
	br.requireChallenged(t, b.url)
}

// TestBrowserConsolePages drives the console's queue, job and
// subscriptions pages in headless Chromium as an operator does: from the
// overview (with recorded waits and their chart) to a queue's page, to a tenant's jobs, to a job's story, whose
// escalation form, filled in and submitted, moves the job (its effect in
// the database, the operator as the actor); then the subscriptions page,
// where a user looked up gets a tier. Screenshots are logged, and written
// to TIERQ_SCREENSHOT_DIR when it is set (console-overview.png,
// console-queue.png, console-job.png, console-subscriptions.png).
//
// It needs Chromium, as TestBrowserRiverUI.
func TestBrowserConsolePages(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	held := b.insertJob(t, "analysis_default", "held", "acme", `{"target": "/srv/acme"}`)
	b.insertJob(t, "analysis_default", "available", "acme", `{}`)
	b.insertJob(t, "analysis_default", "available", "busy", `{}`)
	var counts waitstats.Histogram // recorded waits: 12 jobs in (8s, 10s] this minute
	counts[40] = 12
	_, err := b.db.Pool.Exec(t.Context(), `INSERT INTO job_wait_stats (minute, queue, tier, counts)
		VALUES (date_trunc('minute', now()), 'analysis_default', 'pro', $1)`, counts[:])
	require.NoError(t, err)
	id := strconv.FormatInt(held, 10)
	shots := screenshotDirs(t)
	br := startBrowser(t, adminToken)

	br.do(t, "open the overview", chromedp.Navigate(b.url+"/console/"))
	br.waitText(t, "the overview shows the recorded waits", pageText, "Waits from the due time", "9s", "9.98s", "top 9.98s")
	require.True(t, br.eval(t, `document.querySelectorAll('svg.chart polyline').length === 1`), "the waits' chart is drawn")
	br.screenshot(t, shots, "console-overview.png")
	queueLink := `a[href="/console/queues/analysis_default"]`
	br.do(t, "open the queue's page", chromedp.WaitVisible(chromedp.CSS(queueLink)), chromedp.Click(chromedp.CSS(queueLink)),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/console/queues/analysis_default?tenant=acme"]`)))
	br.waitText(t, "the queue's page shows its tenants and limits", pageText,
		"Queue analysis_default", "Tenants by waiting work", "acme", "busy", "Limits of analyzer")

	jobLink := `a[href="/console/jobs/` + id + `"]`
	br.do(t, "open acme's jobs", chromedp.Click(chromedp.CSS(`a[href="/console/queues/analysis_default?tenant=acme"]`)),
		chromedp.WaitVisible(chromedp.CSS(jobLink)))
	br.waitText(t, "the tenant's jobs are listed", pageText, "Tenant acme", "0 running, 1 available, 1 held; weight 1", "held")
	br.screenshot(t, shots, "console-queue.png")

	form := `form[action="/console/jobs/` + id + `/escalate"]`
	br.do(t, "open job "+id, chromedp.Click(chromedp.CSS(jobLink)), chromedp.WaitVisible(chromedp.CSS(form)))
	br.waitText(t, "the job's story", pageText, "held by fair share", "analysis_default (priority 4)", "acme", `"target": "/srv/acme"`, "tierq has not moved the job.")
	require.True(t, br.eval(t, `document.querySelector('a[href="/riverui/jobs/`+id+`"]') != null`), "the job links to River UI")

	br.do(t, "fill in the escalation",
		chromedp.SetValue(chromedp.CSS(form+` select[name="queue_class"]`), "priority"),
		chromedp.SetValue(chromedp.CSS(form+` select[name="priority"]`), "2"),
		chromedp.SendKeys(chromedp.CSS(form+` textarea[name="reason"]`), "VIP customer, INC-9"))
	br.do(t, "submit the escalation", chromedp.Click(chromedp.CSS(form+` button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`table caption`))) // the moves' table, on the page after the escalation
	br.waitText(t, "the story shows the move", pageText, "escalation", "analysis_priority (priority 2)", "operator", "VIP customer, INC-9")
	br.screenshot(t, shots, "console-job.png")
	var (
		queue    string
		priority int
	)
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT queue, priority FROM river_job WHERE id = $1`, held).Scan(&queue, &priority))
	require.Equal(t, "analysis_priority", queue)
	require.Equal(t, 2, priority)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM job_escalations WHERE job_id = $1 AND actor = 'operator' AND reason = 'VIP customer, INC-9'`, held))

	lookup := `form[action="/console/subscriptions"][method="get"]`
	set := `form[action="/console/subscriptions"][method="post"]`
	br.do(t, "open the subscriptions page", chromedp.Click(chromedp.CSS(`nav a[href="/console/subscriptions"]`)), chromedp.WaitVisible(chromedp.CSS(lookup)))
	br.do(t, "look acme up", chromedp.SendKeys(chromedp.CSS(lookup+` input[name="user"]`), "acme"),
		chromedp.Click(chromedp.CSS(lookup+` button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(set)))
	br.waitText(t, "acme has no subscription", pageText, "User acme: no subscription: free.")
	br.do(t, "set acme's tier", chromedp.SetValue(chromedp.CSS(set+` select[name="tier"]`), "enterprise"),
		chromedp.Click(chromedp.CSS(set+` button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(`table caption`)))
	br.waitText(t, "the page shows the new tier", pageText, "User acme: enterprise, set ")
	br.screenshot(t, shots, "console-subscriptions.png")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM subscriptions WHERE user_id = 'acme' AND tier = 'enterprise'`))
	require.Contains(t, b.log.String(), `"msg":"console action","action":"set tier","actor":"operator","user_id":"acme","from_tier":"free","tier":"enterprise"`)
	br.requireChallenged(t, b.url)
}
