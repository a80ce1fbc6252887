package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"time"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/waitstats"
)

// SetNowFunc replaces the clock of s's readyz migration cache; call it
// before s serves.
func SetNowFunc(s *Server, now func() time.Time) { s.ready.nowFunc = now }

// HandSchema is the args schema of kind in OpenAPIFor's document had its
// args type's OpenAPISchema returned hand, or why there is none.
func HandSchema(kind service.Kind, hand json.RawMessage) (json.RawMessage, error) {
	return handSchema(kind, hand)
}

// ConsoleQueueSQL are the queue page's statements, by name, for the plan
// test: the tenants' counts ($1 queue, $2 limit, $3 a tenant key or NULL)
// and a tenant's jobs ($1 queue, $2 tenant key, $3
// limit), by a tenant id or by a key that is not one.
func ConsoleQueueSQL() map[string]string {
	return map[string]string{
		"tenants":     queueTenantsSQL,
		"tenant jobs": tenantJobsSQL(true), "tenant jobs by key": tenantJobsSQL(false),
	}
}

// WaitChart is the overview's chart of ser: its polylines' points and the
// top of its scale.
func WaitChart(ser *waitstats.Series) (lines []string, top time.Duration) {
	c := newWaitChart(ser)
	return c.Lines, c.Max
}

// FormatWait is how the overview writes a recorded wait.
func FormatWait(d time.Duration) string { return formatWait(d) }

// Snapshots is the metrics' database reads of q over reg's queues, each
// fresh for cacheFor, for the test of recent.
type Snapshots struct{ c *dbCollector }

func NewSnapshots(q db.Querier, reg *service.Registry, cacheFor time.Duration) Snapshots {
	return Snapshots{newDBCollector(q, reg, slog.New(slog.NewTextHandler(io.Discard, nil)), cacheFor)}
}

// RecentLeader is the River leader and the read time of the overview's
// snapshot (recent(maxAge)).
func (s Snapshots) RecentLeader(maxAge time.Duration) (string, time.Time, error) {
	snap := s.c.recent(maxAge)
	return snap.leader, snap.readAt, snap.err
}
