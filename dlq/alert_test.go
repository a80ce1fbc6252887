package dlq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
)

// webhook is a local HTTP server standing in for an alert receiver.
type webhook struct {
	*httptest.Server

	mu       sync.Mutex
	received []dlq.Alert
	status   int           // answer with this (0: 204)
	hang     chan struct{} // when not nil, requests block until it closes
}

func newWebhook(t *testing.T) *webhook {
	t.Helper()
	w := &webhook{}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		hang, status := w.hang, w.status
		w.mu.Unlock()
		if hang != nil {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		var alert dlq.Alert
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" ||
			json.NewDecoder(r.Body).Decode(&alert) != nil {
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.received = append(w.received, alert)
		w.mu.Unlock()
		if status == 0 {
			status = http.StatusNoContent
		}
		rw.WriteHeader(status)
	}))
	t.Cleanup(w.Close)
	return w
}

func (w *webhook) alerts() []dlq.Alert {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]dlq.Alert(nil), w.received...)
}

func (w *webhook) set(status int, hang chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status, w.hang = status, hang
}

func TestAlertFiresAtThresholdIsRateLimitedAndResolves(t *testing.T) {
	t.Parallel()
	b := setup(t, 6)
	ctx := context.Background()
	hook := newWebhook(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	alerter := dlq.NewAlerter(dlq.AlertConfig{
		Threshold: 4, WebhookURL: hook.URL + "/hooks/secret-token", Interval: time.Hour, Timeout: time.Second, Source: "test",
	}, logger)
	check := func() dlq.AlertOutcome {
		t.Helper()
		depth, err := dlq.PendingDepth(ctx, b.db.Pool)
		require.NoError(t, err)
		return alerter.Check(ctx, b.db.Pool, depth)
	}

	// 3 pending (3 replayed): under the threshold, nothing sent.
	b.replay(t, b.ids[:3], dlq.ReplayOptions{})
	require.Equal(t, dlq.AlertQuiet, check())
	require.Empty(t, hook.alerts())

	// 6 pending: fires once, with the depth, threshold and queues.
	_, err := b.db.Pool.Exec(ctx, `UPDATE dead_letter_jobs SET replayed_at = NULL, replay_job_id = NULL, replayed_by = NULL`)
	require.NoError(t, err)
	require.Equal(t, dlq.AlertFired, check())
	alerts := hook.alerts()
	require.Len(t, alerts, 1)
	require.Equal(t, dlq.StatusFiring, alerts[0].Status)
	require.Equal(t, 6, alerts[0].Depth)
	require.Equal(t, 4, alerts[0].Threshold)
	require.Len(t, alerts[0].Queues, 6)
	require.Equal(t, 1, alerts[0].Queues["analysis_default"])
	require.Equal(t, "test", alerts[0].Source)
	require.Contains(t, alerts[0].Text, "6 dead-lettered jobs")
	require.Contains(t, logs.String(), "level=WARN")

	// Still firing within the interval: nothing more.
	require.Equal(t, dlq.AlertSuppressed, check())
	require.Equal(t, dlq.AlertSuppressed, check())
	require.Len(t, hook.alerts(), 1)

	// Once the interval has passed, it fires again.
	_, err = b.db.Pool.Exec(ctx, `UPDATE dead_letter_alert_state SET last_sent_at = now() - interval '61 minutes'`)
	require.NoError(t, err)
	require.Equal(t, dlq.AlertFired, check())
	require.Len(t, hook.alerts(), 2)

	// Back under: one resolved message, then quiet.
	b.replay(t, b.ids[:3], dlq.ReplayOptions{})
	require.Equal(t, dlq.AlertResolved, check())
	require.Equal(t, dlq.AlertQuiet, check())
	alerts = hook.alerts()
	require.Len(t, alerts, 3)
	require.Equal(t, dlq.StatusResolved, alerts[2].Status)
	require.Equal(t, 3, alerts[2].Depth)

	require.NotContains(t, logs.String(), "secret-token", "the webhook URL is a secret")
}

func TestFailedWebhookIsRetriedAtTheNextCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx := context.Background()
	hook := newWebhook(t)
	var logs bytes.Buffer
	alerter := dlq.NewAlerter(dlq.AlertConfig{
		Threshold: 1, WebhookURL: hook.URL + "/hooks/secret-token", Interval: time.Hour, Timeout: time.Second,
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	depth, err := dlq.PendingDepth(ctx, b.db.Pool)
	require.NoError(t, err)

	hook.set(http.StatusInternalServerError, nil)
	require.Equal(t, dlq.AlertFailed, alerter.Check(ctx, b.db.Pool, depth))
	require.Contains(t, logs.String(), "500 Internal Server Error")
	hook.set(0, nil)
	require.Equal(t, dlq.AlertFired, alerter.Check(ctx, b.db.Pool, depth), "the failed alert is not counted as sent")
	require.Equal(t, dlq.AlertSuppressed, alerter.Check(ctx, b.db.Pool, depth))

	// A receiver that cannot be reached: same, and the log names the host only.
	unreachable := dlq.NewAlerter(dlq.AlertConfig{
		Threshold: 1, WebhookURL: "http://127.0.0.1:1/hooks/secret-token", Interval: time.Hour, Timeout: time.Second,
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	_, err = b.db.Pool.Exec(ctx, `UPDATE dead_letter_alert_state SET firing = false`)
	require.NoError(t, err)
	require.Equal(t, dlq.AlertFailed, unreachable.Check(ctx, b.db.Pool, depth))
	require.Contains(t, logs.String(), "127.0.0.1:1")
	require.NotContains(t, logs.String(), "secret-token")
}

func TestHangingWebhookTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	hook := newWebhook(t)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	hook.set(0, hang)
	alerter := dlq.NewAlerter(dlq.AlertConfig{
		Threshold: 1, WebhookURL: hook.URL, Interval: time.Hour, Timeout: 300 * time.Millisecond,
	}, discard)
	depth, err := dlq.PendingDepth(ctx, b.db.Pool)
	require.NoError(t, err)

	start := time.Now()
	require.Equal(t, dlq.AlertFailed, alerter.Check(ctx, b.db.Pool, depth))
	require.Less(t, time.Since(start), 5*time.Second, "bounded by the timeout, not by the receiver")
}

func TestAlertOffAtThresholdZero(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	ctx := context.Background()
	hook := newWebhook(t)
	on := dlq.NewAlerter(dlq.AlertConfig{Threshold: 1, WebhookURL: hook.URL, Interval: time.Hour, Timeout: time.Second}, discard)
	off := dlq.NewAlerter(dlq.AlertConfig{Threshold: 0, WebhookURL: hook.URL, Interval: time.Hour, Timeout: time.Second}, discard)
	depth := dlq.Depth{Total: 3}

	require.Equal(t, dlq.AlertFired, on.Check(ctx, b.db.Pool, depth))
	require.Equal(t, dlq.AlertOff, off.Check(ctx, b.db.Pool, depth))
	require.Len(t, hook.alerts(), 1, "off sends nothing")
	// Turned on again, it fires afresh instead of thinking it fired an hour ago.
	require.Equal(t, dlq.AlertFired, on.Check(ctx, b.db.Pool, depth))
	require.Len(t, hook.alerts(), 2)
}
