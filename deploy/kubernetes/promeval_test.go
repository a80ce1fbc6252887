package kubernetes_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/testdb"
)

// wantPromQL is what each Prometheus trigger (and the matching HPA metric)
// returns when the API's gauges come from seed: the depth counts available,
// pending (held or not) and running jobs; the wait is the oldest available
// job's, in seconds since seeding (so within a few seconds of it: 4 for
// analysis_priority, whose held job has waited 15s). Neither has a cap.
var wantPromQL = map[string]float64{
	"analysis-priority-load":  10,
	"analysis-priority-wait":  4,
	"analysis-default-load":   6,
	"analysis-scheduled-load": 2,
	"specview-priority-load":  16,
	"specview-priority-wait":  30,
	"specview-default-load":   5,
	"specview-scheduled-load": 0,
}

// TestPrometheusQueriesOnTheAPIsMetrics evaluates every Prometheus trigger
// with Prometheus' own engine over what the real API exports for seed,
// scraped as from two API replicas (each exports the same database
// gauges): each returns one sample, the expected one, not twice it. The
// HPA variant's External metrics are evaluated the same way, through the
// adapter's rules with the HPA's selector, summed as the HPA sums them.
func TestPrometheusQueriesOnTheAPIsMetrics(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	// The seed's -infinity row, past migration 00010's check (as in
	// TestKEDAQueriesOnPostgreSQL).
	testdb.AllowInfinite(t, db)
	ctx := context.Background()
	for _, s := range seed {
		_, err := db.Pool.Exec(ctx, seedSQL, s.args()...)
		require.NoError(t, err, "%+v", s)
	}

	// One scrape of the real API's /metrics.
	rec := httptest.NewRecorder()
	api.NewMetrics(db.Pool, testdb.Registry(t), slog.New(slog.NewTextHandler(io.Discard, nil))).Handler().
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	textParser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := textParser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	require.NoError(t, err)
	var load strings.Builder
	load.WriteString("load 1m\n")
	for _, name := range []string{"tierq_queue_depth", "tierq_oldest_available_seconds"} {
		f, ok := families[name]
		require.True(t, ok, name)
		for _, replica := range []string{"api-0", "api-1"} {
			for _, m := range f.GetMetric() {
				labels := []string{fmt.Sprintf("instance=%q", replica)}
				for _, l := range m.GetLabel() {
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				fmt.Fprintf(&load, "  %s{%s} %v\n", name, strings.Join(labels, ","), m.GetGauge().GetValue())
			}
		}
	}
	storage := promqltest.LoadedStorage(t, load.String())
	engine := promqltest.NewTestEngine(t, false, 0, 100000)
	eval := func(where, query string) float64 {
		t.Helper()
		q, err := engine.NewInstantQuery(ctx, storage, nil, query, time.Unix(0, 0))
		require.NoError(t, err, where)
		defer q.Close()
		res := q.Exec(ctx)
		require.NoError(t, res.Err, where)
		vector, err := res.Vector()
		require.NoError(t, err, where)
		sum := 0.0
		for _, s := range vector {
			sum += s.F
		}
		if where != "hpa" {
			require.Len(t, vector, 1, "%s: KEDA wants one sample: %s", where, query)
		}
		return sum
	}
	check := func(where, name string, got float64) {
		t.Helper()
		want, ok := wantPromQL[name]
		require.True(t, ok, "%s: no expected value for %s", where, name)
		if strings.HasSuffix(name, "-wait") {
			require.InDelta(t, want, got, 5, "%s %s", where, name)
			return
		}
		require.Equal(t, want, got, "%s %s", where, name)
	}

	checked := map[string]bool{}
	b := buildVariant(t, variantNamed(t, "prod with keda-prometheus"))
	for _, s := range scalers(t, b) {
		for _, tr := range s.triggers {
			check(b.variant.name, tr.name, eval(tr.name, tr.query))
			checked[tr.name] = true
		}
	}
	require.ElementsMatch(t, mapsKeys(wantPromQL), mapsKeys(checked))

	// The HPA's External metrics, through the adapter's rules.
	raw, err := os.ReadFile("components/hpa/prometheus-adapter-rules.yaml")
	require.NoError(t, err)
	type rule struct {
		Name struct {
			As string `json:"as"`
		} `json:"name"`
		MetricsQuery string `json:"metricsQuery"`
	}
	var rules struct {
		ExternalRules []rule `json:"externalRules"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	hpa := buildVariant(t, variantNamed(t, "prod with hpa"))
	hpaChecked := 0
	for _, h := range all[*autoscalingHPA](hpa) {
		for _, m := range h.Spec.Metrics {
			e := m.External
			i := slices.IndexFunc(rules.ExternalRules, func(r rule) bool { return r.Name.As == e.Metric.Name })
			require.GreaterOrEqual(t, i, 0, e.Metric.Name)
			query := strings.NewReplacer("<<.Series>>", e.Metric.Name, "<<.LabelMatchers>>", matchers(t, e.Metric.Selector)).
				Replace(rules.ExternalRules[i].MetricsQuery)
			tr := hpaTrigger(t, h.Name, m)
			name := strings.ReplaceAll(tr.queue, "_", "-") + "-" + tr.measure // the KEDA trigger's name
			check("hpa "+h.Name, name, eval("hpa", query))
			hpaChecked++
		}
	}
	require.Equal(t, 8, hpaChecked)
}

// matchers is the PromQL label matchers the Prometheus adapter makes of an
// HPA's metric selector.
func matchers(t *testing.T, sel *metav1.LabelSelector) string {
	t.Helper()
	var out []string
	for _, k := range slices.Sorted(mapsKeysIter(sel.MatchLabels)) {
		out = append(out, fmt.Sprintf("%s=%q", k, sel.MatchLabels[k]))
	}
	for _, e := range sel.MatchExpressions {
		require.Equal(t, metav1.LabelSelectorOpIn, e.Operator)
		out = append(out, fmt.Sprintf("%s=~%q", e.Key, strings.Join(e.Values, "|")))
	}
	return strings.Join(out, ",")
}
