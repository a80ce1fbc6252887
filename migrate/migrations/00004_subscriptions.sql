-- The tier each user pays for, read by the API before every insert (ADR-16:
-- producers query the subscription before enqueue). A user with no row is on
-- the free tier.

-- +goose Up
CREATE TABLE subscriptions (
    user_id    text        PRIMARY KEY CHECK (length(user_id) BETWEEN 1 AND 200),
    tier       text        NOT NULL CHECK (tier IN ('free', 'pro', 'pro_plus', 'enterprise')),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE subscriptions;
