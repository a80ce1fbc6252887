// Package subscriptions keeps the tier each user pays for (table
// subscriptions) and looks it up for the API before every insert. A user
// with no row is on the free tier; the client never chooses its tier.
package subscriptions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/tiers"
)

// MaxUserIDLen is the longest user id (bytes): a user id is the tenant id
// of the jobs inserted for the user (jobmeta.MaxTenantBytes).
const MaxUserIDLen = jobmeta.MaxTenantBytes

// ErrInvalidUserID: empty, or breaking the rule for tenant ids (too long,
// not UTF-8, or with a control character).
var ErrInvalidUserID = errors.New("invalid user id")

// CheckUserID reports what is wrong with a user id, as an ErrInvalidUserID:
// a user id is a tenant id that is not empty, so the rule is
// jobmeta.CheckTenant's (at most 200 bytes of UTF-8, no control
// characters), and the problem is worded as it words it ("invalid user id:
// control character U+001B at byte 1").
func CheckUserID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidUserID)
	}
	var tenantErr *jobmeta.TenantError
	if errors.As(jobmeta.CheckTenant(id), &tenantErr) {
		return fmt.Errorf("%w: %s", ErrInvalidUserID, tenantErr.Problem)
	}
	return nil
}

// Lookup returns the user's tier: Free when the user has no subscription.
// An error means the database could not say; the caller decides the
// fallback (the API routes to `_default` and counts it).
func Lookup(ctx context.Context, q db.Querier, userID string) (tiers.Tier, error) {
	var name string
	err := q.QueryRow(ctx, `SELECT tier FROM subscriptions WHERE user_id = $1`, userID).Scan(&name)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return tiers.Free, nil
	case err != nil:
		return 0, fmt.Errorf("look up subscription: %w", err)
	}
	return tiers.Parse(name)
}

// Get reads the user's subscription; ok is false when the user has none
// (the user is on the free tier). The user id is not checked: one that
// breaks the rule has no row.
func Get(ctx context.Context, q db.Querier, userID string) (sub Subscription, ok bool, err error) {
	var name string
	err = q.QueryRow(ctx, `SELECT user_id, tier, updated_at FROM subscriptions WHERE user_id = $1`, userID).Scan(&sub.UserID, &name, &sub.UpdatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Subscription{}, false, nil
	case err != nil:
		return Subscription{}, false, fmt.Errorf("read subscription: %w", err)
	}
	if sub.Tier, err = tiers.Parse(name); err != nil {
		return Subscription{}, false, fmt.Errorf("read subscription: %w", err)
	}
	return sub, true, nil
}

// Set records the user's tier (insert or update).
func Set(ctx context.Context, q db.Querier, userID string, tier tiers.Tier) error {
	if err := CheckUserID(userID); err != nil {
		return err
	}
	if !tier.Valid() {
		return fmt.Errorf("%w: %d", tiers.ErrUnknownTier, tier)
	}
	_, err := q.Exec(ctx, `
		INSERT INTO subscriptions (user_id, tier) VALUES ($1, $2)
		ON CONFLICT (user_id) DO UPDATE SET tier = excluded.tier, updated_at = now()`, userID, tier.String())
	if err != nil {
		return fmt.Errorf("set subscription: %w", err)
	}
	return nil
}

// Subscription is one row.
type Subscription struct {
	UserID    string     `json:"user_id"`
	Tier      tiers.Tier `json:"tier"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// List returns up to limit subscriptions with user ids after after, in order.
func List(ctx context.Context, q db.Querier, after string, limit int) ([]Subscription, error) {
	rows, err := q.Query(ctx, `SELECT user_id, tier, updated_at FROM subscriptions WHERE user_id > $1 ORDER BY user_id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	var out []Subscription
	var (
		s    Subscription
		name string
	)
	_, err = pgx.ForEachRow(rows, []any{&s.UserID, &name, &s.UpdatedAt}, func() error {
		t, err := tiers.Parse(name)
		if err != nil {
			return err
		}
		s.Tier = t
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	return out, nil
}
