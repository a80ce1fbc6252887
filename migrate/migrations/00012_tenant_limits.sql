-- Per-tenant limits by tier (package limits, issue 33): concurrency caps
-- (max_running), rates (rate_count jobs started per rate_interval, a token
-- bucket whose burst is the count) and daily enqueue quotas (daily_quota),
-- per service. Limits live here so that every replica reads the same ones.
--
-- Keys:
--   service  a service's name (service.Config.Name, the rule of
--            tierq_services.name): limits are per service, since each
--            service's variables set its own (<NAME>_<TIER>_TENANT_...). A
--            cap or a rate of a service spans its three queues.
--   tier     free, pro, pro_plus or enterprise (tiers.Tier's names).
--   tenant   a tenant id as jobs carry it (metadata tierq:tenant), byte for
--            byte: 1 to 200 bytes (jobmeta.MaxTenantBytes; tierq's entry
--            points refuse longer ids and control characters, and package
--            limits applies the same rule before it writes). For every id
--            tierq accepts this is also fair share's tenant key (fairshare's
--            tenantSQL); a longer id written directly into river_job is keyed
--            there by a form longer than 200 bytes, which no row here
--            matches: such a tenant gets its tier's defaults. A job without
--            a tenant has no per-tenant limit.
--
-- tier_limits: the defaults of each service's tiers, as the scheduler
-- records them from its environment at start (limits.Record): four rows per
-- service, replaced at every start. 0 means no limit (rate_count 0: no rate,
-- rate_interval NULL).
--
-- tenant_limits: per-tenant overrides, set by operators (tierctl limits,
-- the API). A NULL column inherits the tier's default; 0 is "no limit" for
-- this tenant whatever the tier's default. An override beats the tier's
-- default, whatever the tenant's tier.
--
-- tenant_quota_usage: the jobs each tenant inserted per service and UTC
-- day, counted by producer.Insert in the inserting transaction while a
-- daily quota applies (limits.Charge: one atomic upsert that refuses at
-- the quota, so racing inserts never overshoot). Rows older than
-- limits.UsageRetentionDays are deleted by the tenant's next charge and at
-- the scheduler's start. The primary key serves every statement: the
-- charge (one row), a tenant's usage (one row) and the purge (a range of a
-- tenant's days).

-- +goose Up
CREATE TABLE tier_limits (
    service       text        NOT NULL CHECK (service ~ '^[a-z][a-z0-9_]*$' AND length(service) <= 40),
    tier          text        NOT NULL CHECK (tier IN ('free', 'pro', 'pro_plus', 'enterprise')),
    max_running   integer     NOT NULL DEFAULT 0 CHECK (max_running BETWEEN 0 AND 1000000),
    rate_count    integer     NOT NULL DEFAULT 0 CHECK (rate_count BETWEEN 0 AND 1000000),
    rate_interval interval    CHECK (rate_interval > interval '0'),
    daily_quota   bigint      NOT NULL DEFAULT 0 CHECK (daily_quota BETWEEN 0 AND 1000000000),
    recorded_by   text        NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (service, tier),
    CHECK ((rate_count = 0) = (rate_interval IS NULL))
);

CREATE TABLE tenant_limits (
    service       text        NOT NULL CHECK (service ~ '^[a-z][a-z0-9_]*$' AND length(service) <= 40),
    tenant        text        NOT NULL CHECK (octet_length(tenant) BETWEEN 1 AND 200),
    max_running   integer     CHECK (max_running BETWEEN 0 AND 1000000),
    rate_count    integer     CHECK (rate_count BETWEEN 0 AND 1000000),
    rate_interval interval    CHECK (rate_interval > interval '0'),
    daily_quota   bigint      CHECK (daily_quota BETWEEN 0 AND 1000000000),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (service, tenant),
    -- NULL: inherited; 0: no rate; N per interval.
    CHECK ((rate_count IS NULL OR rate_count = 0) = (rate_interval IS NULL))
);

CREATE TABLE tenant_quota_usage (
    service text   NOT NULL CHECK (service ~ '^[a-z][a-z0-9_]*$' AND length(service) <= 40),
    tenant  text   NOT NULL CHECK (octet_length(tenant) BETWEEN 1 AND 200),
    day     date   NOT NULL,
    used    bigint NOT NULL CHECK (used >= 0),
    PRIMARY KEY (service, tenant, day)
);

-- +goose Down
DROP TABLE tenant_quota_usage;
DROP TABLE tenant_limits;
DROP TABLE tier_limits;
