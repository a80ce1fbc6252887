package deploy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/promtest"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/metrics"
	"github.com/tierq/tierq/tiers"
)

// exported is every tierq_* metric the processes export (api, worker,
// scheduler), with its label names, read from the collectors' descriptions.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	rec := &promtest.Recorder{}
	metrics.NewJobs(rec)
	metrics.NewScheduler(rec, testdb.Registry(t).Queues())
	metrics.NewFairShare(rec, testdb.Registry(t).Queues())
	out := rec.Described(t, api.NewMetrics(nil, nil, nil))
	require.Contains(t, out, "tierq_job_wait_seconds")
	return out
}

// grafanaVars stands in for Grafana's variables so that a dashboard query
// parses as PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m")

var slaVar = regexp.MustCompile(`\$sla_[a-z_]+`)

// replicated are the gauges the API reads from the database: every API
// replica exports the same values, so summing them over replicas would
// multiply them by the number of replicas.
var replicated = []string{
	"tierq_queue_depth", "tierq_oldest_available_seconds", "tierq_dlq_depth",
	"tierq_leader_present", "tierq_metrics_database_up", "tierq_unfetchable_jobs",
	"tierq_oldest_waiting_seconds", "tierq_held_jobs", "tierq_jobs_held_by_cap", "tierq_jobs_held_by_rate",
}

// checkExpr parses expr with Prometheus' parser and checks that it selects
// only exported metrics, matches and groups only by their labels (or the
// target labels Prometheus adds), combines the replicated gauges over
// replicas with max or min (or only tests them with absent), and returns
// the metric names it uses and the labels its result keeps.
func checkExpr(t *testing.T, known map[string][]string, where, expr string) (names, labels []string) {
	t.Helper()
	parsed, err := parser.NewParser(parser.Options{}).ParseExpr(slaVar.ReplaceAllString(grafanaVars.Replace(expr), "1"))
	require.NoError(t, err, "%s: %s", where, expr)
	available := []string{"instance", "job"}
	var grouped []string
	parser.Inspect(parsed, func(node parser.Node, path []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			family, ok := familyOf(known, n.Name)
			require.True(t, ok, "%s: %q is not a metric tierq exports (%s)", where, n.Name, expr)
			if slices.Contains(replicated, family) {
				require.True(t, combinedAcrossReplicas(path), "%s: %s is the same on every API replica: combine it with max or min (%s)",
					where, n.Name, expr)
			}
			own := known[family]
			if strings.HasSuffix(n.Name, "_bucket") {
				own = append(slices.Clone(own), "le")
			}
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" {
					require.Contains(t, own, m.Name, "%s: %s has no label %q", where, n.Name, m.Name)
				}
			}
			names = append(names, family)
			available = append(available, own...)
		case *parser.AggregateExpr:
			grouped = append(grouped, n.Grouping...)
		}
		return nil
	})
	for _, l := range grouped {
		require.Contains(t, available, l, "%s: grouping by %q, which no selected metric has (%s)", where, l, expr)
	}
	return names, outputLabels(t, where, parsed, available)
}

// combinedAcrossReplicas says whether the innermost aggregation around a
// selector (path are its ancestors, outermost first) is max or min, or the
// selector is only tested by absent.
func combinedAcrossReplicas(path []parser.Node) bool {
	for _, node := range slices.Backward(path) {
		switch n := node.(type) {
		case *parser.AggregateExpr:
			return n.Op == parser.MAX || n.Op == parser.MIN
		case *parser.Call:
			if n.Func.Name == "absent" {
				return true
			}
		}
	}
	return false
}

// outputLabels is what labels the result of e keeps (all of the selected
// metrics' labels when nothing aggregates them away), checking on the way
// that histogram_quantile aggregates its buckets by le.
func outputLabels(t *testing.T, where string, e parser.Expr, all []string) []string {
	t.Helper()
	switch n := e.(type) {
	case *parser.ParenExpr:
		return outputLabels(t, where, n.Expr, all)
	case *parser.BinaryExpr:
		if _, ok := n.LHS.(*parser.NumberLiteral); ok {
			return outputLabels(t, where, n.RHS, all)
		}
		return outputLabels(t, where, n.LHS, all)
	case *parser.AggregateExpr:
		if n.Without {
			return all
		}
		return n.Grouping
	case *parser.Call:
		switch n.Func.Name {
		case "histogram_quantile":
			inner := outputLabels(t, where, n.Args[1], all)
			require.Contains(t, inner, "le", "%s: histogram_quantile needs its buckets by le", where)
			return slices.DeleteFunc(slices.Clone(inner), func(l string) bool { return l == "le" })
		case "vector", "absent":
			return nil
		}
		for _, arg := range n.Args {
			if arg.Type() == parser.ValueTypeVector || arg.Type() == parser.ValueTypeMatrix {
				return outputLabels(t, where, arg, all)
			}
		}
	}
	return all
}

// familyOf maps a series name to its metric family (a histogram's _bucket,
// _sum and _count series belong to the histogram).
func familyOf(known map[string][]string, name string) (string, bool) {
	if _, ok := known[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if _, ok := known[base]; ok {
				return base, true
			}
		}
	}
	return "", false
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a collapsed row's
}

var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_]+)\s*\}\}`)

// TestDashboardUsesOnlyExportedMetrics checks deploy/grafana/tierq.json: it
// parses, every query is valid PromQL over metrics and labels tierq really
// exports, legends name labels the query keeps, every tierq metric appears,
// and there is a wait panel per tier (with its SLA target) and a dead-letter
// panel.
func TestDashboardUsesOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	known := exported(t)

	raw, err := os.ReadFile("grafana/tierq.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	require.Equal(t, "tierq", d.UID)

	vars := dashboardVars(t)
	require.Equal(t, "prometheus", vars["datasource"], "the data source is a variable, chosen at import")

	var all []panel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	used := map[string]bool{}
	ids := map[int]bool{}
	tierPanels := map[string]bool{}
	dlqPanel := false
	for _, p := range all {
		require.False(t, ids[p.ID], "panel id %d used twice", p.ID)
		ids[p.ID] = true
		require.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, p.Title)
		if p.Type == "row" {
			continue
		}
		require.NotNil(t, p.Datasource, p.Title)
		require.Equal(t, "${datasource}", p.Datasource.UID, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		var tiersFiltered []string
		for _, target := range p.Targets {
			require.Equal(t, target.Expr, strings.TrimSpace(target.Expr))
			for _, v := range slaVar.FindAllString(target.Expr, -1) {
				require.Contains(t, vars, v[1:], "%s: variable %s is not defined", p.Title, v)
			}
			names, labels := checkExpr(t, known, p.Title, target.Expr)
			for _, n := range names {
				used[n] = true
			}
			for _, m := range legendLabel.FindAllStringSubmatch(target.LegendFormat, -1) {
				require.Contains(t, labels, m[1], "%s: legend {{%s}}", p.Title, m[1])
			}
			if m := regexp.MustCompile(`tierq_job_wait_seconds_bucket\{tier="([a-z_]+)"\}`).FindStringSubmatch(target.Expr); m != nil {
				tiersFiltered = append(tiersFiltered, m[1])
			}
			if strings.Contains(target.Expr, "tierq_dlq_depth") {
				dlqPanel = true
			}
		}
		if len(tiersFiltered) > 0 {
			tier := tiersFiltered[0]
			require.Len(t, tiersFiltered, 3, "%s: p50, p95 and p99", p.Title)
			require.Equal(t, []string{tier, tier, tier}, tiersFiltered, p.Title)
			require.True(t, slices.ContainsFunc(p.Targets, func(tg target) bool {
				return tg.Expr == "vector($sla_"+tier+")"
			}), "%s: the tier's SLA target is drawn", p.Title)
			tierPanels[tier] = true
		}
	}
	for _, tier := range tiers.All() {
		require.True(t, tierPanels[tier.String()], "no wait panel for the %s tier", tier)
	}
	require.True(t, dlqPanel, "a dead-letter panel")
	for name := range known {
		require.True(t, used[name], "the dashboard does not show %s", name)
	}
}

var tierAlert = regexp.MustCompile(`tierq_job_wait_seconds_bucket\{tier="([a-z_]+)"\}.* > ([0-9]+)$`)

// alertTemplateFuncs stands in for the functions Prometheus adds to alert
// templates, so that the annotations parse as Go templates.
var alertTemplateFuncs = template.FuncMap{
	"humanize": fmt.Sprint, "humanizeDuration": fmt.Sprint, "humanizePercentage": fmt.Sprint,
}

// dashboardVars are the dashboard's template variables and their values.
func dashboardVars(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("grafana/tierq.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Query
	}
	return vars
}

// TestAlertRulesUseOnlyExportedMetrics checks deploy/prometheus/alerts.yml
// the same way, and that each rule says how bad it is and what happened.
func TestAlertRulesUseOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	known := exported(t)

	raw, err := os.ReadFile("prometheus/alerts.yml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	require.Len(t, file.Groups, 1)
	sla := dashboardVars(t)
	var slaAlerts []string
	alerts := map[string]bool{}
	used := map[string]bool{}
	for _, r := range file.Groups[0].Rules {
		require.False(t, alerts[r.Alert], "alert %s twice", r.Alert)
		alerts[r.Alert] = true
		names, _ := checkExpr(t, known, r.Alert, r.Expr)
		for _, n := range names {
			used[n] = true
		}
		require.Contains(t, []string{"page", "ticket"}, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		if r.For != "" {
			_, err := model.ParseDuration(r.For)
			require.NoError(t, err, "%s: for", r.Alert)
		}
		for name, text := range r.Annotations {
			// Prometheus defines these variables before the text.
			_, err := template.New(name).Funcs(alertTemplateFuncs).Parse(
				"{{$labels := .}}{{$externalLabels := .}}{{$value := .}}" + text)
			require.NoError(t, err, "%s: annotation %s", r.Alert, name)
		}
		// A tier's wait alert fires at the target the dashboard draws.
		if m := tierAlert.FindStringSubmatch(r.Expr); m != nil {
			require.Equal(t, sla["sla_"+m[1]], m[2], "%s: threshold vs the dashboard's sla_%s", r.Alert, m[1])
			require.Contains(t, r.Annotations["summary"], "target "+m[2]+"s", r.Alert)
			slaAlerts = append(slaAlerts, m[1])
		}
	}
	require.ElementsMatch(t, []string{"enterprise", "pro_plus", "pro"}, slaAlerts, "a wait alert per paid tier")
	for _, name := range []string{"tierq_leader", "tierq_leader_present", "tierq_dlq_depth", "tierq_job_wait_seconds", "tierq_oldest_waiting_seconds", "tierq_tier_fallbacks_total"} {
		require.True(t, used[name], "no alert on %s", name)
	}
}

// TestObservabilityProfileIsWired checks that the compose observability
// profile mounts these files where Prometheus and Grafana read them, and that
// Prometheus scrapes the ports the processes serve metrics on.
func TestObservabilityProfileIsWired(t *testing.T) {
	t.Parallel()

	raw, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Profiles    []string          `yaml:"profiles"`
			Volumes     []string          `yaml:"volumes"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &compose))
	mounts := map[string]string{} // container path → file in the repository
	for _, name := range []string{"prometheus", "grafana"} {
		svc, ok := compose.Services[name]
		require.True(t, ok, name)
		require.Equal(t, []string{"observability"}, svc.Profiles, name)
		for _, v := range svc.Volumes {
			src, dst, ok := strings.Cut(strings.TrimSuffix(v, ":ro"), ":")
			require.True(t, ok, v)
			_, err := os.Stat("../" + strings.TrimPrefix(src, "./"))
			require.NoError(t, err, "%s mounts %s", name, src)
			mounts[dst] = strings.TrimPrefix(src, "./")
		}
	}
	require.Equal(t, "deploy/grafana/tierq.json", mounts["/var/lib/grafana/dashboards/tierq.json"])

	raw, err = os.ReadFile("prometheus/prometheus.yml")
	require.NoError(t, err)
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
			DNSSDConfigs []struct {
				Names []string `yaml:"names"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &prom))
	for _, f := range prom.RuleFiles {
		require.Equal(t, "deploy/prometheus/alerts.yml", mounts[f], "rule file %s", f)
	}
	require.Equal(t, "deploy/prometheus/prometheus.yml", mounts["/etc/prometheus/prometheus.yml"])

	// Every tierq process is scraped on the port it serves metrics on.
	scraped := map[string]string{} // service → port
	for _, sc := range prom.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			for _, target := range s.Targets {
				host, port, err := net.SplitHostPort(target)
				require.NoError(t, err)
				scraped[host] = port
			}
		}
		for _, s := range sc.DNSSDConfigs {
			for _, n := range s.Names {
				scraped[n] = strconv.Itoa(s.Port)
			}
		}
	}
	for service, addrVar := range map[string]string{
		"worker-analyzer": "METRICS_ADDR", "worker-specgen": "METRICS_ADDR", "scheduler": "METRICS_ADDR", "api": "API_ADDR",
	} {
		_, port, err := net.SplitHostPort(compose.Services[service].Environment[addrVar])
		require.NoError(t, err, "%s %s", service, addrVar)
		require.Equal(t, port, scraped[service], "Prometheus scrapes %s on its %s port", service, addrVar)
	}
}
