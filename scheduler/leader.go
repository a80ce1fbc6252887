package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/metrics"
)

// watchSQL reads River's leadership row: who holds it ($1 is this client's
// ID) and whether its lease has expired. An expired lease (its holder stopped
// re-electing: it crashed, or lost the database) also sends River's
// "resigned" notification on the leadership topic, which makes River's
// followers bid at once instead of at their next 5–6s election tick. It
// changes nothing: River's own election still decides, and the bid only wins
// because the lease has expired. If a future River ignored the payload,
// failover would fall back to River's tick. (CASE evaluates pg_notify only
// for an expired row.)
const watchSQL = `
SELECT leader_id,
       leader_id = $1 AND expires_at >= now() AS leads,
       CASE WHEN expires_at < now() THEN
           ` + riverschema.NotifyResignedSQL + ` IS NOT NULL
       ELSE false END AS nudged
FROM ` + riverschema.LeaderTable

// WatchLeader checks every interval whether clientID holds River's
// leadership, recording it in m's tierq_leader gauge, and wakes River's
// followers when the lease has expired, until ctx ends. With River's 15s
// lease this bounds failover after a crashed leader to about 15s plus
// interval, rather than up to 21s. When the database cannot be read within
// interval the gauge reads 0: a replica that cannot reach PostgreSQL loses
// its lease too.
func WatchLeader(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, interval time.Duration, clientID string, m *metrics.Scheduler) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		m.SetLeader(watchOnce(ctx, pool, logger, clientID, interval))
	}
}

// watchOnce runs watchSQL once and reports whether clientID leads. A check
// that takes longer than timeout (the database does not answer) counts as
// not leading: River's own lease renewal cannot get through either.
func watchOnce(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, clientID string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rows, err := pool.Query(ctx, watchSQL, clientID)
	if err != nil {
		if ctx.Err() == nil {
			logger.DebugContext(ctx, "leader watch", slog.String("error", err.Error()))
		}
		return false
	}
	defer rows.Close()
	leads := false
	for rows.Next() {
		var (
			leaderID     string
			self, nudged bool
		)
		if err := rows.Scan(&leaderID, &self, &nudged); err != nil {
			logger.DebugContext(ctx, "leader watch", slog.String("error", err.Error()))
			return false
		}
		leads = leads || self
		if nudged {
			logger.InfoContext(ctx, "leadership lease expired; waking followers", slog.String("expired_leader", leaderID))
		}
	}
	return leads && rows.Err() == nil
}
