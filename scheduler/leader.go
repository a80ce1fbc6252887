package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// nudgeSQL finds an expired leadership (its holder stopped re-electing: it
// crashed, or lost the database) and sends River's "resigned" notification on
// the leadership topic, which makes River's followers bid at once instead of
// at their next 5–6s election tick. It changes nothing: River's own election
// still decides, and the bid only wins because the lease has expired. If a
// future River ignored the payload, failover would fall back to River's tick.
const nudgeSQL = `
SELECT leader_id, pg_notify(current_schema() || '.river_leadership',
                            json_build_object('action', 'resigned', 'leader_id', leader_id)::text)
FROM river_leader
WHERE expires_at < now()`

// WatchLeader checks every interval for an expired leadership lease and wakes
// River's followers when it finds one, until ctx ends. With River's 15s lease
// this bounds failover after a crashed leader to about 15s plus interval,
// rather than up to 21s.
func WatchLeader(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		rows, err := pool.Query(ctx, nudgeSQL)
		if err != nil {
			if ctx.Err() == nil {
				logger.DebugContext(ctx, "leader watch", slog.String("error", err.Error()))
			}
			continue
		}
		for rows.Next() {
			var expired string
			var notified any
			if rows.Scan(&expired, &notified) == nil {
				logger.InfoContext(ctx, "leadership lease expired; waking followers", slog.String("expired_leader", expired))
			}
		}
		rows.Close()
	}
}
