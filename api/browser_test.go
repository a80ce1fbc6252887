package api_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// browserTimeout bounds a browser session, from Chromium's start to its
// shutdown: a browser or a page that hangs fails the test, naming the step
// it was waiting for.
const browserTimeout = 60 * time.Second

// pageTimeout bounds one wait for a page to show something. It is shorter
// than browserTimeout, so that a failed wait can still read the page.
const pageTimeout = 20 * time.Second

// The browser's viewport, and so the size of the screenshots.
const viewportWidth, viewportHeight = 1280, 800

// What the test reads of River UI's pages (riverqueue.com/riverui v0.22.0),
// as JavaScript expressions. A job page shows the job's metadata in a
// <dd> after the <dt> "Metadata", as a JSON tree: each object is a Headless
// UI disclosure, an element with role="button" and aria-expanded that opens
// and closes it, and each key and value is a span, with a non-breaking space
// after the colon.
const (
	pageText        = `document.body.innerText`
	metadataSection = `[...document.querySelectorAll("dt")].find(dt => dt.textContent.trim() === "Metadata")?.nextElementSibling`
	metadataToggle  = metadataSection + `?.querySelector('[role="button"][aria-expanded]')`
	metadataText    = `(` + metadataSection + `?.textContent ?? "(no Metadata section)").replaceAll("\u00a0", " ")`
)

// TestBrowserRiverUI drives River UI, as the API serves it, in a real
// headless Chromium: the browser answers the API's Basic auth challenge with
// the admin token, River UI lists the service queues, and the page of a pro
// job shows the tier that producer.Insert recorded in the job's metadata.
//
// The screenshots of the two pages are logged. With TIERQ_SCREENSHOT_DIR set
// they are also written there, as riverui-queues.png and riverui-job.png:
// this is how the README's pictures in docs/img are made, from the
// repository root (go test runs in api/, so give an absolute path):
//
//	TIERQ_SCREENSHOT_DIR=$PWD/docs/img go test -count=1 -run TestBrowserRiverUI ./api/
//
// It needs Chromium: /usr/bin/chromium, which scripts/chromium.sh installs
// (make test runs it first), or the binary that CHROMIUM names.
func TestBrowserRiverUI(t *testing.T) {
	t.Parallel()
	b := setupRiverUI(t, false)
	proID := b.insertRouted(t, jobs.AnalysisArgs{Target: "/srv/repos/billing", UserID: "u_pro", Tier: "pro"}, testdb.Service(t, "analyzer"), tiers.Pro, "u_pro")
	b.insertRouted(t, jobs.AnalysisArgs{Target: "/srv/repos/blog", UserID: "u_free", Tier: "free"}, testdb.Service(t, "analyzer"), tiers.Free, "u_free")
	b.insertRouted(t, jobs.LoadTestArgs{SleepMS: 100, Tier: "pro"}, testdb.Service(t, "specgen"), tiers.Pro, "u_pro")
	b.insertRouted(t, jobs.LoadTestArgs{SleepMS: 100, Tier: "free"}, testdb.Service(t, "specgen"), tiers.Free, "u_free")
	// An operator moved the pro job up: its metadata keeps the move.
	_, err := escalation.Escalate(t.Context(), b.db.Pool, testdb.Registry(t).Queues(), escalation.Request{
		JobID: proID, To: routing.Priority, Priority: 2, Actor: "alice", Reason: "customer call #812",
	})
	require.NoError(t, err)
	shots := screenshotDirs(t)
	br := startBrowser(t, adminToken)

	// An operator opens River UI, which starts on its jobs list, and
	// follows the Queues link.
	br.do(t, "open "+b.url+"/riverui/", chromedp.Navigate(b.url+"/riverui/"))
	br.waitFor(t, "River UI shows its jobs list", `location.pathname === "/riverui/jobs" && document.querySelector('a[href="/riverui/queues"]') != null`)
	// The link's box is wider than the collapsed sidebar (its label is
	// hidden): click its icon, as an operator does.
	br.do(t, "follow the Queues link", chromedp.Click(chromedp.CSS(`a[href="/riverui/queues"] svg`)))
	br.waitFor(t, "River UI shows its queues page", `location.pathname === "/riverui/queues"`)
	br.waitText(t, "the queues page lists the service queues", pageText,
		"analysis_priority", "analysis_default", "analysis_scheduled",
		"specview_priority", "specview_default", "specview_scheduled")
	br.screenshot(t, shots, "riverui-queues.png")

	// A link to the pro job's page.
	jobURL := b.url + "/riverui/jobs/" + strconv.FormatInt(proID, 10)
	br.do(t, "open "+jobURL, chromedp.Navigate(jobURL))
	br.waitText(t, "the job page shows the pro job", pageText, "ID: "+strconv.FormatInt(proID, 10), "analysis_priority", `"/srv/repos/billing"`)
	br.waitFor(t, "the job page shows its metadata", metadataSection+` != null`)
	// River UI v0.22.0 opens the top level of a job's metadata by itself;
	// should a later version show it closed, open it as an operator would.
	if br.eval(t, `(`+metadataToggle+`)?.getAttribute("aria-expanded") === "false"`) {
		br.do(t, "open the metadata", chromedp.Click(chromedp.JSPath(metadataToggle)))
	}
	br.waitText(t, "the job's metadata shows the tier that producer.Insert recorded", metadataText, `"tierq:tier": "pro"`, `"tierq:tenant": "u_pro"`, `"tierq:moves"`)
	// Nested values (the moves) start closed: open each, as an operator
	// would, until the operator's escalation is in view.
	collapsed := metadataSection + `?.querySelector('[role="button"][aria-expanded="false"]')`
	for range 5 {
		if !br.eval(t, `(`+collapsed+`) != null`) {
			break
		}
		br.do(t, "open a nested metadata value", chromedp.Click(chromedp.JSPath(collapsed)))
	}
	br.waitText(t, "the job's metadata shows the operator's move", metadataText,
		`"kind": "escalation"`, `"actor": "alice"`, `"reason": "customer call #812"`, `"to_priority": 2`)
	br.do(t, "scroll to the metadata", chromedp.ScrollIntoView(chromedp.JSPath(metadataSection))) // if it is below the viewport
	br.screenshot(t, shots, "riverui-job.png")

	br.requireChallenged(t, b.url)
}

// insertRouted inserts args as the API does (producer.Insert, in a
// transaction, routed for service and tier, for tenant) and returns the
// job's id.
func (b *riverUIBundle) insertRouted(t *testing.T, args river.JobArgs, svc *service.Service, tier tiers.Tier, tenant string) int64 {
	t.Helper()
	ctx := t.Context()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	res, err := producer.Insert(ctx, b.db.Producer(t), tx, producer.Job{Args: args, Service: svc, Tier: tier, Tenant: tenant})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return res.Job.ID
}

// browser is a tab of a headless Chromium that answers the Basic auth
// challenges of the pages it opens.
type browser struct {
	ctx context.Context // the tab's chromedp context; ends after browserTimeout

	mu         sync.Mutex
	challenges []fetch.AuthChallenge    // the challenges seen
	answered   map[fetch.RequestID]bool // the requests given the password
	replyErr   error                    // the first failed reply to a paused request
}

// startBrowser starts Chromium (CHROMIUM, else /usr/bin/chromium) with a
// fresh profile and a viewport of viewportWidth × viewportHeight. It answers
// each Basic auth challenge with password, as a browser does with what its
// user types into the login prompt: through the Fetch domain, which pauses
// each request (let through unchanged) and reports each challenge. A second
// challenge for one request (the password was refused) is cancelled, so the
// page shows the API's 401 and the wait for that page fails with it. When the
// test ends the browser is closed, its process waited for, and its profile
// removed.
func startBrowser(t *testing.T, password string) *browser {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("this test needs Chromium: %v; run scripts/chromium.sh (make test does), or set CHROMIUM to a Chromium or Chrome binary", err)
	}

	// Not t.Context(): it ends before the cleanups run, and the browser must
	// still be there to be closed gracefully.
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Headless,  // also hides the scroll bars and mutes audio
		chromedp.NoSandbox, // Chromium's sandbox does not run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // a container's /dev/shm may be small
		chromedp.UserDataDir(t.TempDir()),            // removed after the cleanup below
		chromedp.WindowSize(viewportWidth, viewportHeight),
	)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	br := &browser{ctx: tabCtx, answered: map[fetch.RequestID]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		if err := chromedp.Cancel(tabCtx); err != nil && ctx.Err() == nil {
			t.Errorf("close the browser: %v", err)
		}
		cancelTab()
		cancelAlloc() // waits for the browser's process to exit
		cancel()
		wg.Wait() // the loops below end with tabCtx
	})

	if err := chromedp.Do(tabCtx, chromedp.EmulateViewport(viewportWidth, viewportHeight)); err != nil {
		t.Fatalf("start %s: %v%s", path, err, br.deadlineNote())
	}
	paused := chromedp.Events(tabCtx, fetch.RequestPaused)
	challenged := chromedp.Events(tabCtx, fetch.AuthRequired)
	if _, err := chromedp.Call(tabCtx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: new(true)}); err != nil {
		t.Fatalf("enable the Fetch domain: %v%s", err, br.deadlineNote())
	}
	wg.Go(func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			_, err := chromedp.Call(tabCtx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
			br.replyFailed(err)
		}
	})
	wg.Go(func() {
		for ev, err := range challenged {
			if err != nil {
				return
			}
			reply := fetch.AuthChallengeResponse{
				Response: fetch.AuthChallengeResponseResponseProvideCredentials,
				Username: "operator", // any user name will do
				Password: password,
			}
			br.mu.Lock()
			if br.answered[ev.RequestID] {
				reply = fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
			}
			br.answered[ev.RequestID] = true
			br.challenges = append(br.challenges, *ev.AuthChallenge)
			br.mu.Unlock()
			_, err := chromedp.Call(tabCtx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID, AuthChallengeResponse: &reply})
			br.replyFailed(err)
		}
	})
	return br
}

// replyFailed records the first error of a reply to a paused request, unless
// the browser is shutting down.
func (br *browser) replyFailed(err error) {
	if err == nil || br.ctx.Err() != nil {
		return
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	if br.replyErr == nil {
		br.replyErr = err
	}
}

// do runs the step's actions, failing the test with what the step was.
func (br *browser) do(t *testing.T, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, pageTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v%s\npage text:\n%s", step, err, br.deadlineNote(), br.read(pageText))
	}
}

// eval is the truth of the JavaScript expression cond.
func (br *browser) eval(t *testing.T, cond string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, pageTimeout)
	defer cancel()
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`Boolean(`+cond+`)`))
	if err != nil {
		t.Fatalf("evaluate %s: %v%s", cond, err, br.deadlineNote())
	}
	return ok
}

// waitFor waits until the JavaScript expression cond holds, failing the test
// with the page's text when it does not within pageTimeout.
func (br *browser) waitFor(t *testing.T, what, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, pageTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(0))); err != nil {
		t.Fatalf("waiting until %s (%s): %v%s\npage text:\n%s", what, cond, err, br.deadlineNote(), br.read(pageText))
	}
}

// waitText waits until the text that the JavaScript expression text gives
// contains each of want, failing the test with that text when it does not
// within pageTimeout.
func (br *browser) waitText(t *testing.T, what, text string, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, pageTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](`(want) => { const text = `+text+`; return want.every(w => text.includes(w)); }`,
		chromedp.WithPollingArgs(want), chromedp.WithPollingTimeout(0)))
	if err != nil {
		t.Fatalf("waiting until %s (%q): %v%s\ntext:\n%s", what, want, err, br.deadlineNote(), br.read(text))
	}
}

// read is the string that the JavaScript expression gives, or why there is
// none: it is for failure messages.
func (br *browser) read(expr string) string {
	if err := br.ctx.Err(); err != nil {
		return "(the browser is closed: " + err.Error() + ")"
	}
	ctx, cancel := context.WithTimeout(br.ctx, 5*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String(`+expr+`)`))
	if err != nil {
		return "(cannot read the page: " + err.Error() + ")"
	}
	return text
}

// deadlineNote says that the browser session ran out of time, when it did.
func (br *browser) deadlineNote() string {
	if errors.Is(br.ctx.Err(), context.DeadlineExceeded) {
		return " (the browser session ran out of its " + browserTimeout.String() + ")"
	}
	return ""
}

// screenshotDirs are where the screenshots go: a temporary directory, and
// TIERQ_SCREENSHOT_DIR when it is set.
func screenshotDirs(t *testing.T) []string {
	t.Helper()
	dirs := []string{t.TempDir()}
	if dir := os.Getenv("TIERQ_SCREENSHOT_DIR"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		dirs = append(dirs, dir)
	}
	return dirs
}

// screenshot saves the viewport as the PNG file name in each of dirs. Not
// the whole page: River UI's layout is as high as the viewport, so below it
// a full-page screenshot shows the page without its sidebar.
func (br *browser) screenshot(t *testing.T, dirs []string, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, pageTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v%s", name, err, br.deadlineNote())
	}
	require.True(t, strings.HasPrefix(string(png), "\x89PNG\r\n"), "a PNG image")
	for _, dir := range dirs {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, png, 0o644))
		t.Logf("screenshot: %s", path)
	}
}

// requireChallenged checks that the pages came through the API's Basic auth
// challenge, from origin with tierq's realm (at least once: after the first
// answer the browser sends the password with the requests under /riverui/ by
// itself), and that every paused request was let through.
func (br *browser) requireChallenged(t *testing.T, origin string) {
	t.Helper()
	br.mu.Lock()
	defer br.mu.Unlock()
	require.NoError(t, br.replyErr, "a reply to a paused request")
	require.NotEmpty(t, br.challenges, "the API challenged the browser")
	for _, c := range br.challenges {
		require.Equal(t, fetch.AuthChallenge{Source: fetch.AuthChallengeSourceServer, Origin: origin, Scheme: "basic", Realm: "tierq River UI"}, c)
	}
}
