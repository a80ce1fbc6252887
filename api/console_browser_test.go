package api_test

import (
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
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
