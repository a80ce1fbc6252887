package dlq_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
)

// These tests run two alerters, as two scheduler replicas do, on one real
// dead_letter_alert_state row. Alerter A's receiver is slow and then fails;
// while A waits for it, the other replica (or an operator's configuration)
// changes the state. When A's send fails, it may put back only the state
// its own claim wrote: anything else is someone else's, newer, state.

// slowReceiver is an alert receiver that holds every request until released
// and then fails it (503), the way an overloaded receiver does.
type slowReceiver struct {
	*httptest.Server

	arrived chan struct{} // one value per request received
	release chan struct{}
	once    sync.Once
}

func newSlowReceiver(t *testing.T) *slowReceiver {
	t.Helper()
	r := &slowReceiver{arrived: make(chan struct{}, 16), release: make(chan struct{})}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.arrived <- struct{}{}
		select {
		case <-r.release:
		case <-req.Context().Done():
			return
		}
		http.Error(w, "receiver overloaded", http.StatusServiceUnavailable)
	}))
	t.Cleanup(r.Close) // runs after unblock: cleanups run last-registered first
	t.Cleanup(r.unblock)
	return r
}

func (r *slowReceiver) unblock() { r.once.Do(func() { close(r.release) }) }

// waitArrived waits until the receiver holds a request.
func (r *slowReceiver) waitArrived(t *testing.T) {
	t.Helper()
	select {
	case <-r.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the alert never reached the slow receiver")
	}
}

// alertState is the dead_letter_alert_state row.
type alertState struct {
	Firing     bool
	LastSentAt *time.Time
}

func readAlertState(t *testing.T, db *testdb.DB) alertState {
	t.Helper()
	var s alertState
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT firing, last_sent_at FROM dead_letter_alert_state`).Scan(&s.Firing, &s.LastSentAt))
	return s
}

// requireSameState compares two states, timestamps to the microsecond.
func requireSameState(t *testing.T, want, got alertState, msg string) {
	t.Helper()
	require.Equal(t, want.Firing, got.Firing, "firing: %s", msg)
	if want.LastSentAt == nil || got.LastSentAt == nil {
		require.Equal(t, want.LastSentAt, got.LastSentAt, "last_sent_at: %s", msg)
		return
	}
	require.True(t, want.LastSentAt.Equal(*got.LastSentAt), "last_sent_at: %s: want %s, got %s", msg, want.LastSentAt, got.LastSentAt)
}

// checkInBackground runs a.Check in a goroutine owned by the test; the
// returned channel yields its outcome.
func checkInBackground(t *testing.T, a *dlq.Alerter, db *testdb.DB, depth dlq.Depth) <-chan dlq.AlertOutcome {
	t.Helper()
	out := make(chan dlq.AlertOutcome, 1)
	go func() { out <- a.Check(context.Background(), db.Pool, depth) }()
	return out
}

func waitOutcome(t *testing.T, out <-chan dlq.AlertOutcome) dlq.AlertOutcome {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("the slow alerter's Check did not return")
		return ""
	}
}

// TestAlertRestoreDoesNotUndoAnotherReplicasAlert: replica A claims the
// firing alert and its receiver hangs; one interval later replica B claims
// and sends the next firing alert. A's send then fails: A must leave B's
// state alone, or the alert B just sent is forgotten and sent again at once.
func TestAlertRestoreDoesNotUndoAnotherReplicasAlert(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx := context.Background()
	depth, err := dlq.PendingDepth(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, 2, depth.Total)

	// Both replicas alike: an interval shorter than the webhook timeout, so
	// a slow receiver can still hold A's call when B's next alert is due.
	slow, good := newSlowReceiver(t), newWebhook(t)
	a := dlq.NewAlerter(dlq.AlertConfig{Threshold: 1, WebhookURL: slow.URL, Interval: 2 * time.Second, Timeout: 30 * time.Second, Source: "a"}, discard)
	bAlerter := dlq.NewAlerter(dlq.AlertConfig{Threshold: 1, WebhookURL: good.URL, Interval: 2 * time.Second, Timeout: 30 * time.Second, Source: "b"}, discard)

	aDone := checkInBackground(t, a, b.db, depth)
	slow.waitArrived(t)
	require.True(t, readAlertState(t, b.db).Firing, "A's claim is committed while its send waits")

	testdb.WaitFor(t, 10*time.Second, "A's claim to be one interval old", func() bool {
		return b.db.Count(t, `SELECT count(*) FROM dead_letter_alert_state WHERE last_sent_at <= now() - interval '2 seconds'`) == 1
	})
	require.Equal(t, dlq.AlertFired, bAlerter.Check(ctx, b.db.Pool, depth))
	require.Len(t, good.alerts(), 1)
	afterB := readAlertState(t, b.db)
	require.True(t, afterB.Firing)

	slow.unblock()
	require.Equal(t, dlq.AlertFailed, waitOutcome(t, aDone))
	requireSameState(t, afterB, readAlertState(t, b.db), "A's failed send must not undo the alert B sent")

	// So the next check, on either replica, is suppressed: B's alert
	// counts as sent.
	require.Equal(t, dlq.AlertSuppressed, a.Check(ctx, b.db.Pool, depth))
	require.Equal(t, dlq.AlertSuppressed, bAlerter.Check(ctx, b.db.Pool, depth))
	require.Len(t, good.alerts(), 1, "no second firing alert within the interval")
}

// TestAlertRestoreAfterResolvedDoesNotRefire: A claims the resolved message
// and its receiver hangs; meanwhile the depth rises and falls again and B
// sends both a firing alert and its resolved message. The row then reads
// "not firing" again, as A's claim left it, but it is B's: A must not put
// its old firing state back, or the next check sends a second "resolved".
func TestAlertRestoreAfterResolvedDoesNotRefire(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx := context.Background()
	over, under := dlq.Depth{Total: 2}, dlq.Depth{Total: 0}

	slow, good := newSlowReceiver(t), newWebhook(t)
	a := dlq.NewAlerter(dlq.AlertConfig{Threshold: 1, WebhookURL: slow.URL, Interval: time.Hour, Timeout: 30 * time.Second, Source: "a"}, discard)
	bAlerter := dlq.NewAlerter(dlq.AlertConfig{Threshold: 1, WebhookURL: good.URL, Interval: time.Hour, Timeout: 30 * time.Second, Source: "b"}, discard)

	require.Equal(t, dlq.AlertFired, bAlerter.Check(ctx, b.db.Pool, over))

	aDone := checkInBackground(t, a, b.db, under) // claims the resolved message
	slow.waitArrived(t)
	require.False(t, readAlertState(t, b.db).Firing)

	require.Equal(t, dlq.AlertFired, bAlerter.Check(ctx, b.db.Pool, over))
	require.Equal(t, dlq.AlertResolved, bAlerter.Check(ctx, b.db.Pool, under))
	afterB := readAlertState(t, b.db)
	require.False(t, afterB.Firing)

	slow.unblock()
	require.Equal(t, dlq.AlertFailed, waitOutcome(t, aDone))
	requireSameState(t, afterB, readAlertState(t, b.db), "A's failed resolved message must not bring back the firing state")

	require.Equal(t, dlq.AlertQuiet, a.Check(ctx, b.db.Pool, under), "B's resolved message was sent: nothing is firing")
	alerts := good.alerts()
	require.Len(t, alerts, 3)
	require.Equal(t, []string{dlq.StatusFiring, dlq.StatusFiring, dlq.StatusResolved},
		[]string{alerts[0].Status, alerts[1].Status, alerts[2].Status})
}

// TestAlertRestoreDoesNotUndoAlertingTurnedOff: A claims a firing alert and
// its receiver hangs; a replica with the alert turned off (threshold 0)
// forgets the firing state meanwhile. A's failed send must not bring it back.
func TestAlertRestoreDoesNotUndoAlertingTurnedOff(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx := context.Background()
	over := dlq.Depth{Total: 2}
	_, err := b.db.Pool.Exec(ctx, `UPDATE dead_letter_alert_state SET firing = true, last_sent_at = now() - interval '2 hours'`)
	require.NoError(t, err)

	slow := newSlowReceiver(t)
	a := dlq.NewAlerter(dlq.AlertConfig{Threshold: 1, WebhookURL: slow.URL, Interval: time.Hour, Timeout: 30 * time.Second}, discard)
	off := dlq.NewAlerter(dlq.AlertConfig{Threshold: 0, Interval: time.Hour, Timeout: time.Second}, discard)

	aDone := checkInBackground(t, a, b.db, over)
	slow.waitArrived(t)
	require.Equal(t, dlq.AlertOff, off.Check(ctx, b.db.Pool, over))
	requireSameState(t, alertState{Firing: false}, readAlertState(t, b.db), "turned off: the firing state is forgotten")

	slow.unblock()
	require.Equal(t, dlq.AlertFailed, waitOutcome(t, aDone))
	requireSameState(t, alertState{Firing: false}, readAlertState(t, b.db), "A's failed send must not bring back the state alerting-off forgot")
}

// TestFailedSendRestoresTheStateExactly: with no one else writing, a failed
// send puts back exactly the state before its claim, so the next check tries
// again, for a firing alert and for the resolved message alike.
func TestFailedSendRestoresTheStateExactly(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx := context.Background()
	over, under := dlq.Depth{Total: 2}, dlq.Depth{Total: 0}
	hook := newWebhook(t)
	alerter := dlq.NewAlerter(dlq.AlertConfig{Threshold: 1, WebhookURL: hook.URL, Interval: time.Hour, Timeout: 5 * time.Second}, discard)

	// Never fired: back to not firing, never sent.
	hook.set(http.StatusBadGateway, nil)
	require.Equal(t, dlq.AlertFailed, alerter.Check(ctx, b.db.Pool, over))
	requireSameState(t, alertState{Firing: false}, readAlertState(t, b.db), "a first alert that failed")
	hook.set(0, nil)
	require.Equal(t, dlq.AlertFired, alerter.Check(ctx, b.db.Pool, over), "retried at the next check")

	// Fired two hours ago, due again: back to that alert's time.
	_, err := b.db.Pool.Exec(ctx, `UPDATE dead_letter_alert_state SET last_sent_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	before := readAlertState(t, b.db)
	hook.set(http.StatusBadGateway, nil)
	require.Equal(t, dlq.AlertFailed, alerter.Check(ctx, b.db.Pool, over))
	requireSameState(t, before, readAlertState(t, b.db), "a repeated alert that failed")
	hook.set(0, nil)
	require.Equal(t, dlq.AlertFired, alerter.Check(ctx, b.db.Pool, over), "retried at the next check")

	// The resolved message failed: still firing, as sent last.
	before = readAlertState(t, b.db)
	hook.set(http.StatusBadGateway, nil)
	require.Equal(t, dlq.AlertFailed, alerter.Check(ctx, b.db.Pool, under))
	requireSameState(t, before, readAlertState(t, b.db), "a resolved message that failed")
	hook.set(0, nil)
	require.Equal(t, dlq.AlertResolved, alerter.Check(ctx, b.db.Pool, under), "retried at the next check")
	// Every attempt reached the receiver; the first of each pair was
	// answered 502.
	var statuses []string
	for _, a := range hook.alerts() {
		statuses = append(statuses, a.Status)
	}
	require.Equal(t, []string{dlq.StatusFiring, dlq.StatusFiring, dlq.StatusFiring, dlq.StatusFiring, dlq.StatusResolved, dlq.StatusResolved}, statuses)
}
