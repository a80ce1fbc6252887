package kubernetes_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/promtest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/metrics"
)

// exportedMetrics are the metric families the processes export, with their
// labels: the workers' and the scheduler's (package metrics) and the API's,
// read from their collectors' own descriptions. apiOwn are the API's.
func exportedMetrics(t *testing.T) (all, apiOwn map[string][]string) {
	t.Helper()
	rec := &promtest.Recorder{}
	queues := testdb.Registry(t).Queues()
	metrics.NewJobs(rec)
	metrics.NewScheduler(rec, queues)
	metrics.NewFairShare(rec, queues)
	all = rec.Described(t, api.NewMetrics(nil, nil, nil))
	apiOwn = (&promtest.Recorder{}).Described(t, api.NewMetrics(nil, nil, nil))
	require.Contains(t, all, "tierq_job_wait_seconds")
	require.Contains(t, apiOwn, "tierq_queue_depth")
	return all, apiOwn
}

// replicated are the API's gauges read from the database: every API
// replica exports the same value, so a query takes their max (or min)
// over replicas, never their sum.
var replicated = []string{
	"tierq_queue_depth", "tierq_oldest_available_seconds", "tierq_dlq_depth", "tierq_leader_present", "tierq_metrics_database_up",
	"tierq_unfetchable_jobs", "tierq_oldest_waiting_seconds", "tierq_held_jobs", "tierq_jobs_held_by_cap", "tierq_jobs_held_by_rate",
}

// checkPromQL parses query and checks that it selects only metrics the
// processes export, matches only labels they have, takes the max or min of
// a replicated gauge over replicas before anything else, and keeps the
// labels keep (none: one series, as KEDA wants) and no others.
func checkPromQL(t *testing.T, where, query string, keep []string) {
	t.Helper()
	known, apiOwn := exportedMetrics(t)
	for _, name := range replicated {
		require.Contains(t, apiOwn, name, "a replicated gauge the API no longer exports")
	}
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(query)
	require.NoError(t, err, "%s: %s", where, query)
	selectors := 0
	parser.Inspect(expr, func(node parser.Node, path []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		selectors++
		labels, ok := known[vs.Name]
		require.True(t, ok, "%s: %q is not a metric the processes export (%s)", where, vs.Name, query)
		for _, m := range vs.LabelMatchers {
			if m.Name != "__name__" {
				require.Contains(t, labels, m.Name, "%s: %s has no label %q", where, vs.Name, m.Name)
			}
		}
		if slices.Contains(replicated, vs.Name) {
			var innermost *parser.AggregateExpr
			for _, n := range slices.Backward(path) {
				if a, ok := n.(*parser.AggregateExpr); ok {
					innermost = a
					break
				}
			}
			require.NotNil(t, innermost, "%s: %s is the same on every API replica: take its max", where, vs.Name)
			require.Contains(t, []parser.ItemType{parser.MAX, parser.MIN}, innermost.Op, "%s: %s is the same on every API replica: take its max", where, vs.Name)
		}
		return nil
	})
	require.Positive(t, selectors, where)
	top, ok := expr.(*parser.AggregateExpr)
	require.True(t, ok, "%s: the result is an aggregation: %s", where, query)
	require.False(t, top.Without, where)
	require.ElementsMatch(t, keep, top.Grouping, "%s: the labels of the result", where)
}

// TestPrometheusQueries: every Prometheus trigger of the KEDA variant
// parses, reads only tierq's exported metrics and returns one series; the
// Prometheus adapter's rules for the HPA variant likewise, keeping the
// labels the HPAs select on, and name every External metric the HPAs use.
func TestPrometheusQueries(t *testing.T) {
	t.Parallel()

	checked := 0
	for _, b := range builds(t) {
		for _, s := range scalers(t, b) {
			for _, tr := range s.triggers {
				if tr.source == "prometheus" {
					checkPromQL(t, b.variant.name+": "+s.name+" "+tr.name, tr.query, nil)
					checked++
				}
			}
		}
	}
	require.Equal(t, 8, checked, "the keda-prometheus variant's triggers")

	raw, err := os.ReadFile("components/hpa/prometheus-adapter-rules.yaml")
	require.NoError(t, err)
	var rules struct {
		ExternalRules []struct {
			SeriesQuery string `json:"seriesQuery"`
			Resources   struct {
				Namespaced *bool `json:"namespaced"`
			} `json:"resources"`
			Name struct {
				As string `json:"as"`
			} `json:"name"`
			MetricsQuery string `json:"metricsQuery"`
		} `json:"externalRules"`
	}
	require.NoError(t, yaml.UnmarshalStrict(raw, &rules))
	served := map[string][]string{} // external metric → labels its series keep
	for _, r := range rules.ExternalRules {
		where := "prometheus-adapter-rules.yaml " + r.Name.As
		// The adapter's template: <<.Series>> is the series' name,
		// <<.LabelMatchers>> the HPA's selector.
		series, err := parser.NewParser(parser.Options{}).ParseMetricSelector(r.SeriesQuery)
		require.NoError(t, err, where)
		var name string
		for _, m := range series {
			if m.Name == "__name__" {
				name = m.Value
			}
		}
		require.Equal(t, r.Name.As, name, where)
		query := strings.NewReplacer("<<.Series>>", name, "<<.LabelMatchers>>", `queue="analysis_priority"`).Replace(r.MetricsQuery)
		require.NotContains(t, query, "<<", where)
		var keep []string
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(query)
		require.NoError(t, err, where)
		if a, ok := expr.(*parser.AggregateExpr); ok {
			keep = a.Grouping
		}
		checkPromQL(t, where, query, keep)
		served[r.Name.As] = keep
		require.Equal(t, new(false), r.Resources.Namespaced, where)
	}
	hpas := 0
	for _, b := range builds(t) {
		for _, s := range scalers(t, b) {
			if s.kind != "HorizontalPodAutoscaler" {
				continue
			}
			hpas++
			for _, tr := range s.triggers {
				keep, ok := served[tr.name]
				require.True(t, ok, "%s: %s: no adapter rule serves %s", b.variant.name, s.name, tr.name)
				require.Contains(t, keep, "queue", "%s: %s selects on queue", b.variant.name, s.name)
				if tr.measure == "load" {
					require.Contains(t, keep, "state", "%s: %s selects on state", b.variant.name, s.name)
				}
			}
		}
	}
	require.Equal(t, 2, hpas)
}
