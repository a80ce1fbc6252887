package kubernetes_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/testdb"
)

// TestAlertRulesOnAStarvingHeldTenant evaluates deploy/prometheus's alert
// rules with Prometheus' own engine over what the real API exports when
// fair share holds a tenant back, scraped as from two API replicas: a range
// query, one step a minute for 20 minutes, the waits growing a minute a
// minute. An alert fires at the end when its expression returned its
// series at every step of its "for" (as Prometheus' rule manager decides,
// evaluating once a minute):
//
//   - analysis_default: a tenant held for 2 h beside another tenant's jobs
//     admitted 5 s ago (available). TierqQueueStarved fires, with the held
//     tenant's wait (7,200 s + 20 min), once (not once per replica). The
//     rule as it was, on tierq_oldest_available_seconds, saw 5 s and stayed
//     silent.
//   - analysis_scheduled: background work held for 5 h: TierqBackgroundStarved.
//   - specview_default: held for 10 minutes only: nothing.
//   - analysis_priority: a retry River wrote as available 3 s ahead: not
//     waiting (0, not -3), nothing.
func TestAlertRulesOnAStarvingHeldTenant(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	for _, j := range []testdb.WaitingJob{
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: 2 * time.Hour},
		{Queue: "analysis_default", Held: true, Tenant: "starving", Scheduled: time.Hour},
		{Queue: "analysis_default", Tenant: "busy", Scheduled: 5 * time.Second, Due: 6 * time.Second},
		{Queue: "analysis_scheduled", Held: true, Tenant: "nightly", Scheduled: 5 * time.Hour},
		{Queue: "specview_default", Held: true, Tenant: "recent", Scheduled: 10 * time.Minute},
		{Queue: "analysis_priority", Scheduled: -3 * time.Second},
	} {
		testdb.InsertWaitingJob(t, db, j)
	}

	// One scrape of the real API's /metrics, loaded as two replicas'
	// series: the waits grow by 60 s a minute, the rest stays.
	rec := httptest.NewRecorder()
	api.NewMetrics(db.Pool, testdb.Registry(t), slog.New(slog.NewTextHandler(io.Discard, nil))).Handler().
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	textParser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := textParser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	require.NoError(t, err)
	const minutes = 20
	var load strings.Builder
	load.WriteString("load 1m\n")
	for _, name := range []string{"tierq_queue_depth", "tierq_held_jobs", "tierq_oldest_available_seconds", "tierq_oldest_waiting_seconds"} {
		f, ok := families[name]
		require.True(t, ok, name)
		growth := 0
		if strings.HasSuffix(name, "_seconds") {
			growth = 60
		}
		for _, replica := range []string{"api-0", "api-1"} {
			for _, m := range f.GetMetric() {
				lbls := []string{fmt.Sprintf("instance=%q", replica)}
				for _, l := range m.GetLabel() {
					lbls = append(lbls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				v, grow := m.GetGauge().GetValue(), growth
				if v == 0 {
					grow = 0 // nothing waits: it stays so
				}
				fmt.Fprintf(&load, "  %s{%s} %v+%dx%d\n", name, strings.Join(lbls, ","), v, grow, minutes)
			}
		}
	}
	storage := promqltest.LoadedStorage(t, load.String())
	engine := promqltest.NewTestEngine(t, false, 0, 100000)
	start := time.Unix(0, 0)

	// fires evaluates expr once a minute up to the minute at and returns, by
	// queue, the value at that minute of each series present at every step
	// of the last hold (and at that minute): the alerts firing then.
	fires := func(name, expr string, hold time.Duration, at int) map[string]float64 {
		t.Helper()
		end := start.Add(time.Duration(at) * time.Minute)
		q, err := engine.NewRangeQuery(ctx, storage, nil, expr, end.Add(-hold), end, time.Minute)
		require.NoError(t, err, name)
		defer q.Close()
		res := q.Exec(ctx)
		require.NoError(t, res.Err, name)
		matrix, err := res.Matrix()
		require.NoError(t, err, name)
		out := map[string]float64{}
		for _, series := range matrix {
			if len(series.Floats) == int(hold/time.Minute)+1 {
				out[series.Metric.Get("queue")] = series.Floats[len(series.Floats)-1].F
			}
		}
		return out
	}

	// The rules as written in deploy/prometheus/alerts.yml.
	raw, err := os.ReadFile("../prometheus/alerts.yml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
				For   string `json:"for"`
			} `json:"rules"`
		} `json:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	firing := map[string]map[string]float64{}
	checked := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if strings.Contains(r.Expr, "[") || strings.Contains(r.Expr, "tierq_leader") || strings.Contains(r.Expr, "tierq_metrics_database_up") {
				continue // rates and metrics this scrape does not load
			}
			hold := time.Duration(0)
			if r.For != "" {
				d, err := model.ParseDuration(r.For)
				require.NoError(t, err, r.Alert)
				hold = time.Duration(d)
			}
			require.LessOrEqual(t, hold, minutes*time.Minute, r.Alert)
			if got := fires(r.Alert, r.Expr, hold, minutes); len(got) > 0 {
				firing[r.Alert] = got
			}
			if r.Alert == "TierqQueueStarved" {
				// Over the threshold from the first minute: pending until
				// its 15 minutes have passed.
				require.Empty(t, fires(r.Alert, r.Expr, hold, 14), "fired before its 15 minutes")
				require.NotEmpty(t, fires(r.Alert, r.Expr, hold, 15))
			}
			checked++
		}
	}
	require.GreaterOrEqual(t, checked, 3, "TierqQueueStarved, TierqBackgroundStarved and the others on these gauges")
	require.Equal(t, map[string]map[string]float64{
		"TierqQueueStarved":      {"analysis_default": 7200 + minutes*60},
		"TierqBackgroundStarved": {"analysis_scheduled": 5*3600 + minutes*60},
	}, roundValues(firing, 10), "%v", firing)

	// The starvation rule as it was before held jobs counted.
	require.Empty(t, fires("before", `max by (queue) (tierq_oldest_available_seconds{queue!~".*_scheduled"}) > 3600`, 15*time.Minute, minutes),
		"the oldest available job (5 s) never saw the held tenant")
}

// roundValues rounds each value to the nearest multiple of unit: the
// scrape ran a moment after the rows were written.
func roundValues(m map[string]map[string]float64, unit float64) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for k, byQueue := range m {
		out[k] = map[string]float64{}
		for q, v := range byQueue {
			out[k][q] = float64(int64(v/unit+0.5)) * unit
		}
	}
	return out
}
