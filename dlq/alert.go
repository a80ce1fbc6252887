package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
)

// AlertConfig configures the depth alert.
type AlertConfig struct {
	// Threshold is the depth (rows not replayed) at which the alert fires;
	// 0 turns alerting off.
	Threshold int
	// WebhookURL receives each alert as a JSON POST; empty means log only.
	WebhookURL string
	// Interval is the least time between two alerts while the depth stays
	// at or above the threshold.
	Interval time.Duration
	// Timeout bounds one webhook call.
	Timeout time.Duration
	// Source names the sender in the payload (the scheduler's client id).
	Source string
}

// Alert statuses.
const (
	StatusFiring   = "firing"
	StatusResolved = "resolved"
)

// Alert is the JSON body POSTed to the webhook.
type Alert struct {
	// Status is "firing" (depth at or above the threshold) or "resolved"
	// (back under it after firing).
	Status    string `json:"status"`
	Depth     int    `json:"depth"`
	Threshold int    `json:"threshold"`
	// Queues is the depth per original queue.
	Queues map[string]int `json:"queues"`
	// Text is one human-readable line, for chat webhooks.
	Text   string    `json:"text"`
	At     time.Time `json:"at"`
	Source string    `json:"source"`
}

// Alerter decides after each drain whether to alert. Its state (firing or
// not, when it last sent) lives in dead_letter_alert_state, shared by every
// scheduler replica, so a new leader continues where the old one stopped.
type Alerter struct {
	cfg    AlertConfig
	client *http.Client
	logger *slog.Logger
}

// NewAlerter returns an Alerter for cfg.
func NewAlerter(cfg AlertConfig, logger *slog.Logger) *Alerter {
	return &Alerter{cfg: cfg, client: &http.Client{Timeout: cfg.Timeout}, logger: logger}
}

// AlertOutcome says what one Check did.
type AlertOutcome string

// Check outcomes.
const (
	AlertOff        AlertOutcome = "off"        // alerting disabled
	AlertQuiet      AlertOutcome = "quiet"      // under the threshold, nothing was firing
	AlertFired      AlertOutcome = "fired"      // sent (or logged) a firing alert
	AlertSuppressed AlertOutcome = "suppressed" // still firing, last alert within Interval
	AlertResolved   AlertOutcome = "resolved"   // sent (or logged) the resolved message
	AlertFailed     AlertOutcome = "failed"     // the webhook or the database failed; retried next time
)

// The alert state is one row, written by every scheduler replica. Every
// write to it is a compare-and-set, so that no replica overwrites a state
// it has not seen:
//
//   - a claim (claimFiringSQL, claimResolvedSQL) changes the row only from a
//     state that allows the send, reading and writing it in one statement
//     under the row lock. It returns the state before (to put back if the
//     send fails) and the state it wrote, whose last_sent_at = now() (to the
//     microsecond, the start of the claim's transaction) names this claim:
//     another claim writes the same value only if it starts in the same
//     microsecond.
//   - putting the state back after a failed send (restoreSQL) applies only
//     while the row is still exactly what this claim wrote. Another replica
//     that claimed meanwhile (and sent, or is sending) keeps its state, and
//     so does a replica with the alert turned off that forgot it.
//   - turning the alert off (forgetSQL) changes the row only from firing.

// claimFiringSQL takes the right to send a firing alert: when not firing, or
// the last alert is at least $1 seconds old.
const claimFiringSQL = `
WITH old AS (SELECT firing, last_sent_at FROM dead_letter_alert_state FOR UPDATE)
UPDATE dead_letter_alert_state AS s SET firing = true, last_sent_at = now()
FROM old
WHERE NOT old.firing OR old.last_sent_at IS NULL OR old.last_sent_at <= now() - make_interval(secs => $1)
RETURNING old.firing, old.last_sent_at, s.firing, s.last_sent_at`

// claimResolvedSQL takes the right to send the resolved message: only while
// firing. last_sent_at becomes the time of the resolved message (a firing
// claim ignores it while not firing).
const claimResolvedSQL = `
WITH old AS (SELECT firing, last_sent_at FROM dead_letter_alert_state FOR UPDATE)
UPDATE dead_letter_alert_state AS s SET firing = false, last_sent_at = now()
FROM old
WHERE old.firing
RETURNING old.firing, old.last_sent_at, s.firing, s.last_sent_at`

// restoreSQL puts back the state from before a claim ($1, $2), only if the
// row is still what that claim wrote ($3, $4).
const restoreSQL = `
UPDATE dead_letter_alert_state SET firing = $1, last_sent_at = $2
WHERE firing IS NOT DISTINCT FROM $3 AND last_sent_at IS NOT DISTINCT FROM $4`

// forgetSQL forgets a firing alert when alerting is turned off, so turning
// it on again starts afresh.
const forgetSQL = `UPDATE dead_letter_alert_state SET firing = false, last_sent_at = NULL WHERE firing`

// alertState is the row: before a claim, and as a claim wrote it.
type alertState struct {
	firing   bool
	lastSent *time.Time
}

// Check alerts on depth: a warning (and a webhook POST) when depth is at or
// above the threshold, at most once per Interval, and one "resolved" message
// when it falls back under after firing. A send that fails is logged and
// the state put back, so the next Check tries again. Check never returns an
// error: alerting must not break the drain that calls it.
func (a *Alerter) Check(ctx context.Context, q db.Querier, depth Depth) AlertOutcome {
	if a.cfg.Threshold <= 0 {
		// Alerting was turned off: forget an alert that was firing, so
		// turning it on again starts afresh.
		if _, err := q.Exec(ctx, forgetSQL); err != nil {
			a.logger.ErrorContext(ctx, "dead-letter alert state", slog.String("error", err.Error()))
		}
		return AlertOff
	}
	firing := depth.Total >= a.cfg.Threshold
	claimSQL, args := claimResolvedSQL, []any{}
	if firing {
		claimSQL, args = claimFiringSQL, []any{a.cfg.Interval.Seconds()}
	}
	var before, claimed alertState
	err := q.QueryRow(ctx, claimSQL, args...).Scan(&before.firing, &before.lastSent, &claimed.firing, &claimed.lastSent)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if firing {
			return AlertSuppressed
		}
		return AlertQuiet
	case err != nil:
		a.logger.ErrorContext(ctx, "dead-letter alert state", slog.String("error", err.Error()))
		return AlertFailed
	}

	alert := a.alert(depth, firing)
	if firing {
		a.logger.WarnContext(ctx, alert.Text, slog.Int("depth", depth.Total),
			slog.Int("threshold", a.cfg.Threshold), slog.Any("queues", depth.ByQueue))
	} else {
		a.logger.InfoContext(ctx, alert.Text, slog.Int("depth", depth.Total), slog.Int("threshold", a.cfg.Threshold))
	}
	if err := a.send(ctx, alert); err != nil {
		a.logger.ErrorContext(ctx, "dead-letter alert webhook failed; will retry after the next drain",
			slog.String("status", alert.Status), slog.String("error", err.Error()))
		a.restore(ctx, q, before, claimed)
		return AlertFailed
	}
	if firing {
		return AlertFired
	}
	return AlertResolved
}

// restore puts the state from before a claim back after its send failed,
// so the next Check tries again; unless another replica has written the row
// since the claim: then that state is newer and stays.
func (a *Alerter) restore(ctx context.Context, q db.Querier, before, claimed alertState) {
	// A fresh context: ctx may be what ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	tag, err := q.Exec(ctx, restoreSQL, before.firing, before.lastSent, claimed.firing, claimed.lastSent)
	switch {
	case err != nil:
		a.logger.ErrorContext(ctx, "dead-letter alert state", slog.String("error", err.Error()))
	case tag.RowsAffected() == 0:
		a.logger.InfoContext(ctx, "dead-letter alert state changed since this alert was claimed (another scheduler alerted, or alerting was turned off); left as it is")
	}
}

func (a *Alerter) alert(depth Depth, firing bool) Alert {
	alert := Alert{
		Status:    StatusResolved,
		Depth:     depth.Total,
		Threshold: a.cfg.Threshold,
		Queues:    depth.ByQueue,
		At:        time.Now().UTC(),
		Source:    a.cfg.Source,
	}
	if alert.Queues == nil {
		alert.Queues = map[string]int{}
	}
	if firing {
		alert.Status = StatusFiring
		parts := make([]string, 0, len(depth.ByQueue))
		for _, q := range slices.Sorted(maps.Keys(depth.ByQueue)) {
			parts = append(parts, fmt.Sprintf("%s %d", q, depth.ByQueue[q]))
		}
		alert.Text = fmt.Sprintf("tierq: %d dead-lettered jobs wait for an operator (threshold %d): %s",
			depth.Total, a.cfg.Threshold, strings.Join(parts, ", "))
	} else {
		alert.Text = fmt.Sprintf("tierq: dead letters back under the threshold (%d < %d)", depth.Total, a.cfg.Threshold)
	}
	return alert
}

// send POSTs the alert to the webhook, if one is set; a non-2xx status is an
// error. Errors never carry the URL: webhook URLs hold secrets.
func (a *Alerter) send(ctx context.Context, alert Alert) error {
	if a.cfg.WebhookURL == "" {
		return nil
	}
	body, err := json.Marshal(alert)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return errors.New("webhook request could not be built")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tierq-scheduler")
	resp, err := a.client.Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err // without the URL
		}
		return fmt.Errorf("post to webhook host %s: %w", req.URL.Host, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook host %s answered %s", req.URL.Host, resp.Status)
	}
	return nil
}
