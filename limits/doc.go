// Package limits owns tierq's per-tenant limits by tier (issue 33): for each
// service, each tier's defaults and each tenant's overrides of three kinds
// of limit, kept in the database so that every replica reads the same ones
// (migration 00012):
//
//   - MaxRunning, a concurrency cap: the most jobs of one tenant of the
//     service running at once, across every replica and the service's three
//     queues.
//   - Rate: jobs of one tenant of the service started per second, minute or
//     hour ("10/s", "100/m", "1000/h"), a token bucket whose burst is the
//     count.
//   - DailyQuota, an enqueue quota: the most jobs of one tenant of the
//     service inserted per UTC day.
//
// 0 (a zero Rate) means no limit. Quotas are enforced: producer.Insert
// charges every job it inserts for a tenant (Charge, in the inserting
// transaction) and refuses the job past the quota with a *QuotaError;
// POST /v1/jobs answers 429. Caps are enforced by the database: migration
// 00013's trigger on river_job holds (River state pending) a job becoming
// available while its tenant's running and available jobs across the
// service's queues are at the cap, and fair share's pass admits it when
// the tenant has room (package fairshare). Rates are enforced the same way:
// migration 00015's trigger holds a job becoming available unless its
// tenant has a token in its bucket (tenant_rate_buckets) and no other job
// available and not started yet, and fair share's pass admits it when both
// hold (docs/fairness.md, "Rate limits").
//
// # Where limits come from
//
// A tier's defaults are the scheduler's to record: scheduler.Run writes its
// Config.Limits (a Config: the limits by tier of each service) to table
// tier_limits when it starts (Record), from the variables
// <NAME>_<TIER>_TENANT_{MAX_RUNNING,RATE,DAILY_QUOTA} when it is configured
// by the environment (package config, LoadLimits). Every other process
// reads the table, never its own environment. A tenant's override
// (tenant_limits) is an operator's, set with tierctl limits or the API
// (SetOverride, UnsetOverride) and read the same way; it beats the tier's
// default whatever the tenant's tier: a NULL field inherits the default, 0
// is no limit for that tenant.
//
// # Keys
//
// Limits are per service (its name, service.Config.Name), tier (free, pro,
// pro_plus, enterprise; any other tier, the zero value included, reads as
// free, as routing sends it to the default queue) and tenant: the tenant id
// a job carries (metadata tierq:tenant), byte for byte, 1 to 200 bytes
// with no control character (jobmeta.CheckTenant). A job without a tenant
// is under no per-tenant limit: nothing counts or refuses it.
//
// # Quotas
//
// A tenant's day is the UTC day of the inserting transaction's clock,
// now() (the database's: the same for every replica), unless the Job gives
// its own time. Charge counts in table tenant_quota_usage with one atomic
// upsert that refuses once the day's count has reached the quota, so
// inserts racing for the last places never overshoot: the row stays locked
// until the inserting transaction ends, and a transaction that rolls back
// takes its count with it. Only jobs producer.Insert inserts count, and a
// duplicate River's uniqueness finds (a dedup hit) does not. The count is
// kept only while a quota applies: a quota set mid-day counts from then on.
package limits
