package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/routing"
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

// TestBrowserConsolePurge purges a dead letter through its page in
// headless Chromium: the purge form's box must be ticked (the browser
// will not submit it otherwise), and, ticked and submitted, the dead
// letter is gone from dead_letter_jobs, the list says so, the other dead
// letters are kept, and the console's log line (all a purge leaves)
// names the operator.
//
// It needs Chromium, as TestBrowserRiverUI.
func TestBrowserConsolePurge(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	testdb.SeedDiscarded(t, b.db, 6) // 1 per service queue
	drainAll(t, b.bundle)
	id := b.deadLetterIDs(t, "queue = 'analysis_default'")[0]
	br := startBrowser(t, adminToken)

	form := `form[action="/console/dead-letters/` + id + `/purge"]`
	br.do(t, "open dead letter "+id, chromedp.Navigate(b.url+"/console/dead-letters/"+id), chromedp.WaitVisible(chromedp.CSS(form)))
	br.waitText(t, "the page shows the purge", pageText, "Purge", "Delete this dead letter for good")
	require.False(t, br.eval(t, `document.querySelector('`+form+`').checkValidity()`), "the browser submits no purge unticked")
	br.do(t, "tick the box", chromedp.Click(chromedp.CSS(form+` input[name="confirm"]`)))
	require.True(t, br.eval(t, `document.querySelector('`+form+`').checkValidity()`), "ticked, the form may be submitted")
	br.do(t, "submit the purge", chromedp.Click(chromedp.CSS(form+` button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.done[role="status"]`))) // on the list, after the purge
	br.waitFor(t, "the list is shown", `location.pathname === "/console/dead-letters" && location.search === "?purged=`+id+`"`)
	br.waitText(t, "the list says the dead letter was purged", pageText, "Dead letter "+id+" purged.")
	require.True(t, br.eval(t, `document.querySelector('a[href="/console/dead-letters/`+id+`"]') === null`), "the list no longer links to it")
	require.True(t, br.eval(t, `document.querySelectorAll('main tbody tr').length === 5`), "the list shows the other 5")

	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs WHERE id = $1`, id))
	require.Equal(t, 5, b.db.Count(t, `SELECT count(*) FROM dead_letter_jobs`))
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM river_job`), "a purge replays nothing")
	require.Contains(t, b.log.String(), `"msg":"console action","action":"purge","actor":"operator","dead_letter_id":`+id+"}")
	br.requireChallenged(t, b.url)
}

// TestBrowserConsoleBulkReplay replays dead letters in bulk through the
// pages in headless Chromium: the list filtered by queue through its form,
// its link to the bulk replay's confirmation, which shows the count and
// carries the ids of the dead letters it shows, and the confirmation
// submitted with a reason. Exactly those are replayed, by the operator,
// as new River jobs; two dead letters of the filter drained after the
// confirmation page was shown are not.
//
// It needs Chromium, as TestBrowserRiverUI.
func TestBrowserConsoleBulkReplay(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	confirmed := b.seedBulk(t)
	shots := screenshotDirs(t)
	br := startBrowser(t, adminToken)

	filter := `form.filter[action="/console/dead-letters"]`
	confirmLink := `a[href="/console/dead-letters/replay?queue=analysis_default"]`
	br.do(t, "open the dead-letters list", chromedp.Navigate(b.url+"/console/dead-letters"), chromedp.WaitVisible(chromedp.CSS(filter)))
	br.do(t, "filter by queue", chromedp.SendKeys(chromedp.CSS(filter+` input[name="queue"]`), "analysis_default"),
		chromedp.Click(chromedp.CSS(filter+` button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(confirmLink)))
	require.True(t, br.eval(t, `[...document.querySelectorAll("main tbody tr td:first-child")].map(td => td.innerText).join(",") === "`+strings.Join(confirmed, ",")+`"`),
		"the list shows the queue's 2 dead letters")

	form := `form[action="/console/dead-letters/replay"][method="post"]`
	br.do(t, "open the confirmation", chromedp.Click(chromedp.CSS(confirmLink)), chromedp.WaitVisible(chromedp.CSS(form)))
	br.waitText(t, "the confirmation shows the filter and the count", pageText,
		"Filter: queue analysis_default, kind , tier , tenant , error contains ; pending only.",
		"This replays exactly the 2 dead letters listed below.",
		"Replayable now, over the whole filter: 2", "Replay these 2 dead letters")
	require.True(t, br.eval(t, `[...document.querySelectorAll('`+form+` input[name="id"]')].map(i => i.value).join(",") === "`+strings.Join(confirmed, ",")+`"`),
		"the form carries the ids shown")
	br.screenshot(t, shots, "console-replay-confirm.png")

	// Two more of the filter arrive while the operator reads the page:
	// seed.Discarded's i = 1 and 7 are analysis_default's again.
	testdb.SeedDiscarded(t, b.db, 7)
	drainAll(t, b.bundle)
	late := b.deadLetterIDs(t, "queue = 'analysis_default' AND id NOT IN ("+strings.Join(confirmed, ",")+")")
	require.Len(t, late, 2)

	br.do(t, "fill in the reason", chromedp.SendKeys(chromedp.CSS(form+` textarea[name="reason"]`), "upstream back, INC-77"))
	br.do(t, "submit the replay", chromedp.Click(chromedp.CSS(form+` button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.done[role="status"]`))) // on the result page
	br.waitText(t, "the result page", pageText, "Replayed 2 of the 2 dead letters confirmed.", "Back to the list")
	require.True(t, br.eval(t, `document.querySelector('main a[href="/console/dead-letters?queue=analysis_default"]') != null`), "back to the filter's list")

	require.Equal(t, confirmed, b.deadLetterIDs(t, "replayed_by = 'operator' AND replay_job_id IS NOT NULL"))
	for _, id := range confirmed {
		var queue, kind, metadata string
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `
			SELECT j.queue, j.kind, j.metadata::text FROM dead_letter_jobs AS d JOIN river_job AS j ON j.id = d.replay_job_id
			WHERE d.id = $1`, id).Scan(&queue, &kind, &metadata))
		require.Equal(t, []string{"analysis_default", "analysis"}, []string{queue, kind}, "dead letter %s", id)
		require.Contains(t, metadata, `"actor": "operator"`, "dead letter %s", id)
		require.Contains(t, metadata, `"reason": "upstream back, INC-77"`, "dead letter %s", id)
	}
	require.Equal(t, late, b.deadLetterIDs(t, "queue = 'analysis_default' AND replayed_at IS NULL AND replay_job_id IS NULL"), "the late ones are not replayed")
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM river_job`))
	require.Contains(t, b.log.String(), `"msg":"console action","action":"bulk replay","actor":"operator","asked":2,"replayed":2`)
	br.requireChallenged(t, b.url)
}

// escalationRowsText is the escalations table's rows as text, a line per
// row, its cells after the time apart by " | ", as a JavaScript
// expression.
const escalationRowsText = `[...document.querySelectorAll("main tbody tr")].map(tr => [...tr.cells].slice(1).map(c => c.innerText.trim()).join(" | ")).join("\n")`

// TestBrowserConsoleEscalations renders the escalation audit in headless
// Chromium against three escalations (alice's two of analysis_default,
// bob's of specview_default), newest first, and filters it through its
// form: by actor, by queue, and by a since after them all.
//
// It needs Chromium, as TestBrowserRiverUI.
func TestBrowserConsoleEscalations(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	queues := testdb.Registry(t).Queues()
	var ids []string
	for i, actor := range []string{"alice", "bob", "alice"} {
		id := testdb.InsertWaitingJob(t, b.db, testdb.WaitingJob{Queue: []string{"analysis_default", "specview_default", "analysis_default"}[i]})
		_, err := escalation.Escalate(t.Context(), b.db.Pool, queues, escalation.Request{JobID: id, To: routing.Priority, Actor: actor, Reason: "call #" + strconv.Itoa(i)})
		require.NoError(t, err)
		ids = append(ids, strconv.FormatInt(id, 10))
	}
	shots := screenshotDirs(t)
	br := startBrowser(t, adminToken)

	filter := `form.filter[action="/console/escalations"]`
	br.do(t, "open the escalations", chromedp.Navigate(b.url+"/console/"), chromedp.WaitVisible(chromedp.CSS(`nav a[href="/console/escalations"]`)),
		chromedp.Click(chromedp.CSS(`nav a[href="/console/escalations"]`)), chromedp.WaitVisible(chromedp.CSS(filter)))
	br.waitFor(t, "every escalation, newest first", escalationRowsText+` === `+jsString(
		ids[2]+" River UI | analysis_default (priority 4) | analysis_priority (priority 1) | alice | call #2\n"+
			ids[1]+" River UI | specview_default (priority 4) | specview_priority (priority 1) | bob | call #1\n"+
			ids[0]+" River UI | analysis_default (priority 4) | analysis_priority (priority 1) | alice | call #0"))
	require.True(t, br.eval(t, `document.querySelector('main a[href="/riverui/jobs/`+ids[1]+`"]') != null`), "a job links to River UI")
	br.screenshot(t, shots, "console-escalations.png")

	br.do(t, "filter by actor", chromedp.SendKeys(chromedp.CSS(filter+` input[name="actor"]`), "alice"),
		chromedp.Click(chromedp.CSS(filter+` button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(filter+` input[name="actor"][value="alice"]`)))
	br.waitFor(t, "alice's escalations", escalationRowsText+` === `+jsString(
		ids[2]+" River UI | analysis_default (priority 4) | analysis_priority (priority 1) | alice | call #2\n"+
			ids[0]+" River UI | analysis_default (priority 4) | analysis_priority (priority 1) | alice | call #0"))

	br.do(t, "filter by queue", chromedp.Clear(chromedp.CSS(filter+` input[name="actor"]`)),
		chromedp.SendKeys(chromedp.CSS(filter+` input[name="queue"]`), "specview_priority"),
		chromedp.Click(chromedp.CSS(filter+` button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(filter+` input[name="queue"][value="specview_priority"]`)))
	br.waitFor(t, "the escalations to specview_priority", `location.search === "?queue=specview_priority&actor=&since=&until=" && `+escalationRowsText+` === `+jsString(
		ids[1]+" River UI | specview_default (priority 4) | specview_priority (priority 1) | bob | call #1"))

	br.do(t, "filter by since", chromedp.Clear(chromedp.CSS(filter+` input[name="queue"]`)),
		chromedp.SendKeys(chromedp.CSS(filter+` input[name="since"]`), "2999-01-01T00:00"),
		chromedp.Click(chromedp.CSS(filter+` button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(filter+` input[name="since"][value="2999-01-01T00:00"]`)))
	br.waitText(t, "no escalation since", pageText, "No escalation matches.")
	require.True(t, br.eval(t, `document.querySelector("main table") === null`), "no table")
	br.requireChallenged(t, b.url)
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	out, err := json.Marshal(s)
	if err != nil {
		panic(err) // a string always marshals
	}
	return string(out)
}

// browserHostile is a value meant to run script in the console's pages,
// if they showed it as markup: a script element and an image whose error
// handler sets window.__pwned, an ANSI escape sequence (red), a
// right-to-left override, and 10 KB. browserHostileText is how the pages
// show its first part, as text: the control and bidi characters as
// visible escapes (safetext).
const (
	browserHostile     = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">` + "\x1b[31m" + "rtl\u202eevil"
	browserHostileText = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">\x1b[31mrtl\u202eevil`
	// browserHostileActor is an operator's hostile user name, short
	// enough to show whole (the tables cut an actor to 60 characters).
	browserHostileActor     = `<img src=x onerror="window.__pwned=1">` + "\x1b[31m\u202eeve"
	browserHostileActorText = `<img src=x onerror="window.__pwned=1">\x1b[31m\u202eeve`
)

// TestBrowserConsoleHostileValues renders hostile args, errors, tenants,
// actors and reasons (browserHostile with 10 KB after it) in headless
// Chromium: a dead letter's page, the dead-letters list, a queue's page of
// the hostile tenant (followed from the queue's tenants), a job's story
// and the escalations page. On each, the values are text: the page shows
// the markup's characters and the escapes, holds no element made from a
// value (no script, no img, no onerror attribute), no ESC or U+202E in its
// text, and no script ran (window.__pwned is undefined). The
// console's Content-Security-Policy runs no inline script either, so
// window.__pwned alone would not catch an escaping failure: the element
// checks do.
//
// It needs Chromium, as TestBrowserRiverUI.
func TestBrowserConsoleHostileValues(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	ctx := t.Context()
	long := browserHostile + strings.Repeat("A", 10<<10)
	longText := browserHostileText + strings.Repeat("A", 10<<10)

	var deadLetter int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		INSERT INTO dead_letter_jobs (job_id, kind, queue, priority, args, metadata, errors, attempt, max_attempts, created_at, finalized_at)
		VALUES (1, 'analysis', 'analysis_default', 4, jsonb_build_object('target', $1::text), jsonb_build_object('tierq:tenant', $1::text),
		        jsonb_build_array(jsonb_build_object('at', now(), 'attempt', 1, 'error', $1::text, 'trace', $1::text)), 1, 1, now(), now())
		RETURNING id`, long).Scan(&deadLetter))
	// River's jobs of the hostile tenant with hostile args, one held in
	// analysis_default, one escalated out of it by a hostile actor with a
	// hostile reason, its last attempt's error hostile too.
	args, err := json.Marshal(map[string]string{"target": long})
	require.NoError(t, err)
	b.insertJob(t, "analysis_default", "held", long, string(args))
	job := b.insertJob(t, "analysis_default", "available", long, string(args))
	_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET attempt = 1, errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', $1::text, 'trace', '')]
		WHERE id = $2`, long, job)
	require.NoError(t, err)
	_, err = escalation.Escalate(ctx, b.db.Pool, testdb.Registry(t).Queues(), escalation.Request{
		JobID: job, To: routing.Priority, Actor: browserHostileActor, Reason: long[:2000],
	})
	require.NoError(t, err)
	// The audit's column takes a reason of any length (Escalate, 2,000 bytes).
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO job_escalations (job_id, from_queue, to_queue, from_priority, to_priority, actor, reason)
		VALUES (1, 'analysis_default', 'analysis_priority', 4, 1, $1, $2)`, browserHostileActor, long)
	require.NoError(t, err)
	br := startBrowser(t, adminToken)

	requireInert := func(what string, want ...string) {
		t.Helper()
		br.waitText(t, what+" shows the values as text", pageText, want...)
		require.True(t, br.eval(t, `typeof window.__pwned === "undefined"`), what+": no script ran")
		require.True(t, br.eval(t, `document.querySelector('img[src="x"]') === null`), what+": no img element")
		require.True(t, br.eval(t, `document.querySelector("[onerror]") === null && document.scripts.length === 0`), what+": no script, no handler")
		require.True(t, br.eval(t, `!document.body.innerText.includes("\u202e") && !document.body.innerText.includes("\x1b")`), what+": no bidi or control character")
	}

	dl := strconv.FormatInt(deadLetter, 10)
	br.do(t, "open dead letter "+dl, chromedp.Navigate(b.url+"/console/dead-letters/"+dl),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/console/dead-letters/`+dl+`/replay"]`)))
	requireInert("the dead letter's page", longText, // the tenant and the error, whole
		`"target": "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=1\">\u001b[31mrtl\u202eevil`+strings.Repeat("A", 10<<10)+`"`)

	br.do(t, "open the dead-letters list", chromedp.Navigate(b.url+"/console/dead-letters"), chromedp.WaitVisible(chromedp.CSS(`a[href="/console/dead-letters/`+dl+`"]`)))
	requireInert("the dead-letters list", `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">\x1b[31mrtl\u202eevilAAAA`)

	tenantLink := `main a[href^="/console/queues/analysis_default?tenant="]`
	br.do(t, "open the queue's page", chromedp.Navigate(b.url+"/console/queues/analysis_default"), chromedp.WaitVisible(chromedp.CSS(tenantLink)))
	requireInert("the queue's page", `<script>window.__pwned=1</script><img src=x onerror="window…`) // cut to 60 characters
	br.do(t, "open the tenant's jobs", chromedp.Click(chromedp.CSS(tenantLink)), chromedp.WaitVisible(chromedp.CSS(`h2#tenant`)))
	br.waitFor(t, "the tenant's page is shown", `location.search.startsWith("?tenant=")`)
	requireInert("the tenant's page", "Tenant "+browserHostileText, "0 running, 0 available, 1 held; weight 1")

	id := strconv.FormatInt(job, 10)
	br.do(t, "open job "+id, chromedp.Navigate(b.url+"/console/jobs/"+id), chromedp.WaitVisible(chromedp.CSS(`table caption`)))
	requireInert("the job's story", longText, // the tenant and the error, whole
		browserHostileActorText, browserHostileText+strings.Repeat("A", 2000-len(browserHostile)), // the move's actor and reason
		`"target": "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=1\">\u001b[31mrtl\u202eevil`+strings.Repeat("A", 10<<10)+`"`)

	br.do(t, "open the escalations", chromedp.Navigate(b.url+"/console/escalations"), chromedp.WaitVisible(chromedp.CSS(`main table`)))
	requireInert("the escalations page", browserHostileActorText, browserHostileText+strings.Repeat("A", 199-len([]rune(browserHostile)))+"…")
	require.True(t, br.eval(t, `[...document.querySelectorAll("main details pre")].length === 2 && [...document.querySelectorAll("main details pre")].every(pre => pre.textContent.startsWith(`+jsString(browserHostileText)+`))`), "the whole reasons, in their details")
	require.True(t, br.eval(t, `document.querySelectorAll("main details pre")[0].textContent === `+jsString(longText)), "the newest reason, whole")
	br.requireChallenged(t, b.url)
}

// TestBrowserConsoleCrossOrigin: another site's page that an operator,
// signed in to the console, opens in headless Chromium posts the
// console's forms by itself (a script submits them): an escalation from
// another origin of the same host (127.0.0.1 on another port: same-site,
// cross-origin) and a tier from another site (localhost). The fields are
// those the console's own forms send, yet the console refuses both with
// its 403 page, because of the Sec-Fetch-Site header the browser sends
// (its log names the header); nothing changes in the database.
//
// It needs Chromium, as TestBrowserRiverUI.
func TestBrowserConsoleCrossOrigin(t *testing.T) {
	t.Parallel()
	b := setupConsole(t)
	job := b.insertJob(t, "analysis_default", "available", "acme", `{}`)
	id := strconv.FormatInt(job, 10)
	pages := map[string]string{
		"/escalate": `<form method="post" action="` + b.url + `/console/jobs/` + id + `/escalate">` +
			`<input name="queue_class" value="priority"><input name="priority" value="1"><input name="reason" value="free upgrade"></form>`,
		"/set-tier": `<form method="post" action="` + b.url + `/console/subscriptions">` +
			`<input name="user" value="mallory"><input name="tier" value="enterprise"></form>`,
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		form, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!doctype html><title>Win a prize</title>`+form+`<script>document.forms[0].submit()</script>`)
	}))
	t.Cleanup(other.Close)
	br := startBrowser(t, adminToken)

	// The operator is signed in: the browser has the console's credentials.
	br.do(t, "open job "+id, chromedp.Navigate(b.url+"/console/jobs/"+id), chromedp.WaitVisible(chromedp.CSS(`form[action="/console/jobs/`+id+`/escalate"]`)))

	for _, tt := range []struct{ name, page, action string }{
		{"same-site", other.URL + "/escalate", "/console/jobs/" + id + "/escalate"},
		{"cross-site", strings.Replace(other.URL, "127.0.0.1", "localhost", 1) + "/set-tier", "/console/subscriptions"},
	} {
		br.do(t, "open "+tt.page, chromedp.Navigate(tt.page))
		br.waitFor(t, "the "+tt.name+" page's post is answered", `location.origin === "`+b.url+`" && location.pathname === "`+tt.action+`"`)
		br.waitText(t, "the console refuses the "+tt.name+" post", pageText, "Forbidden",
			"Cross-origin request refused (cross-origin request detected from Sec-Fetch-Site header): console actions must come from the console's own pages.")
		require.Contains(t, b.log.String(), `"msg":"console cross-origin request refused","method":"POST","path":"`+tt.action+`","reason":"cross-origin request detected from Sec-Fetch-Site header"}`, tt.name)
	}

	var (
		queue    string
		priority int
	)
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT queue, priority FROM river_job WHERE id = $1`, job).Scan(&queue, &priority))
	require.Equal(t, "analysis_default", queue)
	require.Equal(t, 4, priority)
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM job_escalations`))
	require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM subscriptions`))
	require.NotContains(t, b.log.String(), `"msg":"console action"`)
	br.requireChallenged(t, b.url)
}
