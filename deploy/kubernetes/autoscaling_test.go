package kubernetes_test

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"

	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/worker"
)

// scaledObject is the part of a KEDA ScaledObject the tests read (the CRD
// check has validated the whole).
type scaledObject struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
			Kind string `json:"kind"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval"`
		CooldownPeriod  *int32 `json:"cooldownPeriod"`
		MinReplicaCount *int32 `json:"minReplicaCount"`
		MaxReplicaCount *int32 `json:"maxReplicaCount"`
		Advanced        struct {
			HorizontalPodAutoscalerConfig struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior"`
			} `json:"horizontalPodAutoscalerConfig"`
		} `json:"advanced"`
		Fallback *struct {
			FailureThreshold int32 `json:"failureThreshold"`
			Replicas         int32 `json:"replicas"`
		} `json:"fallback"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name"`
			MetricType        string            `json:"metricType"`
			UseCachedMetrics  bool              `json:"useCachedMetrics"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind"`
			} `json:"authenticationRef"`
		} `json:"triggers"`
	} `json:"spec"`
}

// triggerAuthentication is the part of a KEDA TriggerAuthentication the
// tests read.
type triggerAuthentication struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef"`
	} `json:"spec"`
}

// scaler is a ScaledObject or an HPA, as the tests compare them.
type scaler struct {
	kind, name, target string
	min, max           int32
	behavior           *autoscalingv2.HorizontalPodAutoscalerBehavior
	triggers           []trigger
	// keda is the ScaledObject (nil for an HPA).
	keda *scaledObject
}

// trigger is one metric a scaler follows.
type trigger struct {
	name string
	// source is postgresql or prometheus (KEDA), external (an HPA's).
	source     string
	metricType string
	target     float64
	// queue is the one queue it measures; measure is "load" (the jobs the
	// queue's workers have to hold) or "wait" (the oldest waiting job's).
	queue, measure string
	// query is the SQL or PromQL KEDA runs (empty for an HPA's).
	query string
	// activation is KEDA's activation threshold ("" when unset).
	activation string
	// bound is a PostgreSQL query's most jobs counted (load) or its cap in
	// seconds (wait); 0 for other sources.
	bound float64
	// cached is the trigger's useCachedMetrics (KEDA's).
	cached bool
}

var (
	sqlQueue = regexp.MustCompile(`queue = '([a-z0-9_]+)'`)
	// sqlLimit and sqlCap read the bound of a load and a wait query.
	sqlLimit = regexp.MustCompile(`\n    LIMIT ([0-9]+)\n\) AS live\n`)
	sqlCap   = regexp.MustCompile(`, 0\), ([0-9]+)\)::float8 FROM \(\n`)
)

// scalers returns b's ScaledObjects and HPAs.
func scalers(t *testing.T, b *build) []scaler {
	t.Helper()
	var out []scaler
	for _, o := range b.objects {
		where := b.variant.name + ": " + o.kind + "/" + o.name
		switch {
		case o.kind == "ScaledObject":
			var so scaledObject
			require.NoError(t, json.Unmarshal(o.raw, &so))
			require.Contains(t, []string{"", "Deployment"}, so.Spec.ScaleTargetRef.Kind, where)
			require.NotNil(t, so.Spec.MinReplicaCount, where)
			require.NotNil(t, so.Spec.MaxReplicaCount, where)
			s := scaler{kind: "ScaledObject", name: so.Metadata.Name, target: so.Spec.ScaleTargetRef.Name,
				min: *so.Spec.MinReplicaCount, max: *so.Spec.MaxReplicaCount,
				behavior: so.Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior, keda: &so}
			for _, tr := range so.Spec.Triggers {
				kt := kedaTrigger(t, where, tr.Type, tr.Name, tr.MetricType, tr.Metadata)
				kt.cached = tr.UseCachedMetrics
				s.triggers = append(s.triggers, kt)
			}
			out = append(out, s)
		case o.kind == "HorizontalPodAutoscaler":
			hpa := o.typed.(*autoscalingv2.HorizontalPodAutoscaler)
			require.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind, where)
			require.NotNil(t, hpa.Spec.MinReplicas, where)
			s := scaler{kind: "HorizontalPodAutoscaler", name: hpa.Name, target: hpa.Spec.ScaleTargetRef.Name,
				min: *hpa.Spec.MinReplicas, max: hpa.Spec.MaxReplicas, behavior: hpa.Spec.Behavior}
			for _, m := range hpa.Spec.Metrics {
				s.triggers = append(s.triggers, hpaTrigger(t, where, m))
			}
			out = append(out, s)
		}
	}
	return out
}

// kedaTrigger reads a KEDA trigger: its one queue, what it measures, its
// target.
func kedaTrigger(t *testing.T, where, typ, name, metricType string, md map[string]string) trigger {
	t.Helper()
	tr := trigger{name: name, source: typ, metricType: metricType, query: md["query"], activation: md["activationTargetQueryValue"]}
	where += " trigger " + name
	var target string
	switch typ {
	case "postgresql":
		target = md["targetQueryValue"]
		queue := sqlQueue.FindStringSubmatch(tr.query)
		require.NotNil(t, queue, "%s: names no queue:\n%s", where, tr.query)
		tr.queue = queue[1]
		// Exactly loadSQL's or waitSQL's text, for that queue and some bound
		// (which TestEveryWorkerIsScaledOnItsQueues checks).
		if m := sqlLimit.FindStringSubmatch(tr.query); m != nil {
			limit, _ := strconv.Atoi(m[1])
			require.Equal(t, loadSQL(tr.queue, limit), tr.query, "%s: the load query", where)
			tr.measure, tr.bound = "load", float64(limit)
		} else if m := sqlCap.FindStringSubmatch(tr.query); m != nil {
			capSeconds, _ := strconv.Atoi(m[1])
			require.Equal(t, waitSQL(tr.queue, capSeconds), tr.query, "%s: the wait query", where)
			tr.measure, tr.bound = "wait", float64(capSeconds)
		} else {
			t.Fatalf("%s: a query that is neither a load nor a wait:\n%s", where, tr.query)
		}
	case "prometheus":
		target = md["threshold"]
		tr.activation = md["activationThreshold"]
		require.Regexp(t, `^https?://[a-z0-9.-]+(:[0-9]+)?$`, md["serverAddress"], where)
		tr.queue, tr.measure = promQueue(t, where, tr.query)
	default:
		t.Fatalf("%s: trigger type %q", where, typ)
	}
	f, err := strconv.ParseFloat(target, 64)
	require.NoError(t, err, where)
	tr.target = f
	require.True(t, strings.HasSuffix(name, "-"+tr.measure) && strings.HasPrefix(name, tr.queue[:strings.LastIndex(tr.queue, "_")]), "%s: the name says what it measures", where)
	return tr
}

// promQueue is the queue and measure of a KEDA Prometheus query, which the
// Prometheus tests check in full.
func promQueue(t *testing.T, where, query string) (queue, measure string) {
	t.Helper()
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(query)
	require.NoError(t, err, where)
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			for _, m := range vs.LabelMatchers {
				if m.Name == "queue" {
					require.Empty(t, queue, "%s: one queue", where)
					queue = m.Value
				}
			}
			switch vs.Name {
			case "tierq_queue_depth":
				measure = "load"
			case "tierq_oldest_available_seconds":
				measure = "wait"
			}
		}
		return nil
	})
	require.NotEmpty(t, queue, where)
	require.NotEmpty(t, measure, where)
	return queue, measure
}

// hpaTrigger reads an HPA's External metric.
func hpaTrigger(t *testing.T, where string, m autoscalingv2.MetricSpec) trigger {
	t.Helper()
	require.Equal(t, autoscalingv2.ExternalMetricSourceType, m.Type, where)
	e := m.External
	tr := trigger{name: e.Metric.Name, source: "external", metricType: string(e.Target.Type)}
	require.NotNil(t, e.Metric.Selector, where)
	tr.queue = e.Metric.Selector.MatchLabels["queue"]
	require.NotEmpty(t, tr.queue, where)
	switch e.Metric.Name {
	case "tierq_queue_depth":
		tr.measure = "load"
		require.Len(t, e.Metric.Selector.MatchExpressions, 1, where)
		require.Equal(t, "state", e.Metric.Selector.MatchExpressions[0].Key, where)
		require.Equal(t, []string{"available", "pending", "running"}, e.Metric.Selector.MatchExpressions[0].Values, where)
		require.NotNil(t, e.Target.AverageValue, where)
		tr.target = e.Target.AverageValue.AsApproximateFloat64()
	case "tierq_oldest_available_seconds":
		tr.measure = "wait"
		require.NotNil(t, e.Target.Value, where)
		tr.target = e.Target.Value.AsApproximateFloat64()
	default:
		t.Fatalf("%s: metric %s", where, e.Metric.Name)
	}
	return tr
}

// loadFactor is how many jobs of a queue's load one replica is given per
// worker it runs for that queue: paid jobs each want a worker now; free
// and background work is let queue (docs/kubernetes.md, "Autoscaling").
var loadFactor = map[routing.Class]float64{routing.Priority: 1, routing.Default: 10, routing.Scheduled: 25}

// waitTarget is the oldest paid job's wait, in seconds, above which a
// priority queue's Deployment grows (in proportion: a Value target).
const waitTarget = 2

// behavior is every scaler's: up at once (4 pods or 100% per 15s), down
// one pod a minute after 5 minutes of lower demand.
var behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
	ScaleUp: &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: new(int32(0)),
		SelectPolicy:               new(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	},
	ScaleDown: &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: new(int32(300)),
		SelectPolicy:               new(autoscalingv2.MinChangePolicySelect),
		Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 60}},
	},
}

// workerQueues returns, for each worker Deployment of b, the queues it
// serves and their per-pod worker counts, from its container's environment.
func workerQueues(t *testing.T, b *build) map[string]map[string]worker.Queue {
	t.Helper()
	out := map[string]map[string]worker.Queue{}
	for _, d := range all[*appsv1.Deployment](b) {
		for _, c := range d.Spec.Template.Spec.Containers {
			if !isTierq(c) {
				continue
			}
			proc, err := loadProcess(t, c, containerEnv(t, b, c))
			require.NoError(t, err)
			if proc.worker != nil {
				out[d.Name] = proc.queues
			}
		}
	}
	return out
}

// TestEveryWorkerIsScaledOnItsQueues: in every autoscaled variant each
// worker Deployment has exactly one scaler, whose triggers follow the
// queues it serves (from its own environment): a load trigger per queue,
// with a target of its per-pod workers times loadFactor, and on its
// priority queue a wait trigger too; a Deployment serving a priority queue
// never scales to zero. Nothing else is scaled.
func TestEveryWorkerIsScaledOnItsQueues(t *testing.T) {
	t.Parallel()

	for _, b := range builds(t) {
		served := workerQueues(t, b)
		all := scalers(t, b)
		if b.variant.name == "dev" {
			require.Empty(t, all, "dev has no autoscaler")
			continue
		}
		byTarget := map[string]scaler{}
		for _, s := range all {
			where := b.variant.name + ": " + s.kind + "/" + s.name
			require.NotContains(t, byTarget, s.target, "%s: a second scaler of %s", where, s.target)
			require.Contains(t, served, s.target, "%s: scales no worker Deployment", where)
			require.Equal(t, s.target, s.name, where)
			byTarget[s.target] = s
		}
		require.ElementsMatch(t, slices.Collect(maps.Keys(served)), slices.Collect(maps.Keys(byTarget)), "%s: a scaler per worker Deployment", b.variant.name)

		for name, queues := range served {
			s := byTarget[name]
			where := b.variant.name + ": " + s.kind + "/" + s.name
			var seen []string
			servesPriority := false
			for _, tr := range s.triggers {
				where := where + " " + tr.name + " (" + tr.queue + ")"
				qc, ok := queues[tr.queue]
				require.True(t, ok, "%s: a queue %s does not serve", where, name)
				_, class, ok := routing.ClassOf(tr.queue)
				require.True(t, ok, where)
				seen = append(seen, tr.queue+" "+tr.measure)
				if tr.source == "postgresql" {
					// Beyond max x target the HPA asks for max replicas
					// whatever the value: the query stops there.
					require.Equal(t, float64(s.max)*tr.target, tr.bound, "%s: its bound is maxReplicaCount x target", where)
				}
				if s.keda != nil {
					require.True(t, tr.cached, "%s: useCachedMetrics: the HPA's reads between polls cost no query", where)
				}
				switch tr.measure {
				case "load":
					require.Equal(t, "AverageValue", tr.metricType, where)
					require.Equal(t, float64(qc.Workers)*loadFactor[class], tr.target, where)
				case "wait":
					require.Equal(t, routing.Priority, class, "%s: waits drive only paid scaling", where)
					require.Equal(t, "Value", tr.metricType, where)
					require.Equal(t, float64(waitTarget), tr.target, where)
				}
				if class == routing.Priority {
					servesPriority = true
				}
			}
			var want []string
			for queue := range queues {
				want = append(want, queue+" load")
				if _, class, _ := routing.ClassOf(queue); class == routing.Priority {
					want = append(want, queue+" wait")
				}
			}
			require.ElementsMatch(t, want, seen, where)
			if servesPriority {
				require.GreaterOrEqual(t, s.min, int32(1), "%s: serves paid work: never at zero", where)
			}
			require.Equal(t, behavior, s.behavior, where)
			if s.keda != nil {
				require.Equal(t, new(int32(15)), s.keda.Spec.PollingInterval, where)
				require.Equal(t, new(int32(300)), s.keda.Spec.CooldownPeriod, where)
				for _, tr := range s.triggers {
					if s.min == 0 {
						require.Equal(t, "0", tr.activation, "%s: any job in the queue wakes it from zero", where)
					}
				}
			}
		}
	}
}

// TestPrometheusTriggersFallBack: a Prometheus trigger's empty result is
// an error, not a 0 (ignoreNullValues "false": the API exports every
// served queue's gauges, empty or not, so no series means Prometheus lost
// them, TestPrometheusQueriesOnTheAPIsMetrics), and a ScaledObject whose
// trigger fails 3 polls in a row runs 4 replicas until it answers again.
// PostgreSQL triggers have no fallback: without the database the workers
// have nothing to do.
func TestPrometheusTriggersFallBack(t *testing.T) {
	t.Parallel()

	checked := 0
	for _, b := range builds(t) {
		for _, s := range scalers(t, b) {
			if s.keda == nil {
				continue
			}
			where := b.variant.name + ": " + s.name
			prometheus := 0
			for _, tr := range s.keda.Spec.Triggers {
				if tr.Type == "prometheus" {
					require.Equal(t, "false", tr.Metadata["ignoreNullValues"], "%s %s", where, tr.Name)
					prometheus++
				}
			}
			if prometheus == 0 {
				require.Nil(t, s.keda.Spec.Fallback, where)
				continue
			}
			require.Len(t, s.keda.Spec.Triggers, prometheus, where)
			require.NotNil(t, s.keda.Spec.Fallback, where)
			require.Equal(t, int32(3), s.keda.Spec.Fallback.FailureThreshold, where)
			require.Equal(t, int32(4), s.keda.Spec.Fallback.Replicas, where)
			require.True(t, s.min <= 4 && 4 <= s.max, "%s: fallback within the bounds", where)
			checked++
		}
	}
	require.Equal(t, 2, checked)
}

// TestReplicaBounds are the replica bounds docs/kubernetes.md gives, the
// same whichever autoscaler runs them.
func TestReplicaBounds(t *testing.T) {
	t.Parallel()

	combined := map[string][2]int32{"worker-analyzer": {2, 8}, "worker-specgen": {2, 4}}
	want := map[string]map[string][2]int32{
		"prod":                      combined,
		"prod with keda-prometheus": combined,
		"prod with hpa":             combined,
		"prod-split": {
			"worker-analyzer-priority": {2, 8}, "worker-analyzer-default": {0, 6}, "worker-analyzer-scheduled": {0, 2},
			"worker-specgen": {2, 4},
		},
		"prod with the thumbnail example": {"worker-analyzer": {2, 8}, "worker-specgen": {2, 4}, "worker-thumbnailer": {2, 4}},
	}
	for _, b := range builds(t) {
		if b.variant.name == "dev" {
			continue
		}
		got := map[string][2]int32{}
		for _, s := range scalers(t, b) {
			got[s.target] = [2]int32{s.min, s.max}
		}
		require.Equal(t, want[b.variant.name], got, b.variant.name)
	}
}

// TestWorkerPools: each worker Deployment's DATABASE_MAX_CONNS is what one
// of its pods can use at once, W + 2Q + 3 (docs/scaling.md, "Connections":
// its running jobs, a fetch and a fair-share loop per queue, the completer,
// the heartbeat, lending), from the queues it serves in its environment;
// in the prod overlays, the reference app's two worker Deployments have
// prod's smaller pools instead (prodWorkerPools), which fit a stock
// PostgreSQL (TestConnectionBudget).
func TestWorkerPools(t *testing.T) {
	t.Parallel()

	for _, b := range builds(t) {
		for name, queues := range workerQueues(t, b) {
			w := 0
			for _, qc := range queues {
				w += qc.Workers
			}
			want := w + 2*len(queues) + 3
			if pool, ok := prodWorkerPools[name]; ok && strings.HasPrefix(b.variant.name, "prod") {
				require.Less(t, pool, want, "%s: %s: prod's pool is the smaller one", b.variant.name, name)
				want = pool
			}
			c := one[*appsv1.Deployment](t, b, name).Spec.Template.Spec.Containers[0]
			require.Equal(t, strconv.Itoa(want), containerEnv(t, b, c)["DATABASE_MAX_CONNS"], "%s: %s", b.variant.name, name)
		}
	}
}

// prodWorkerPools are overlays/prod's DATABASE_MAX_CONNS for the reference
// app's worker Deployments (the base has W + 2Q + 3: 19 and 15).
var prodWorkerPools = map[string]int{"worker-analyzer": 10, "worker-specgen": 8}

// The connection budget of prod and prod-split on a stock PostgreSQL 15
// (docs/kubernetes.md, "Connection budget"), which lets max_connections 100
// less superuser_reserved_connections 3 log in.
const (
	stockLogins = 97
	// connectionBudget is the most tierq's Deployments may hold at their
	// fewest replicas: 27 left for everything else.
	connectionBudget = 70
	// tierctlSessions are two operator sessions (watch and one command),
	// 4 connections each, as docs/scaling.md's "Connection budget" counts.
	tierctlSessions = 2 * 4
	// otherLogins is docs/scaling.md's "others" row: an exporter, psql.
	otherLogins = 5
)

// TestConnectionBudget is the most connections prod's tierq Deployments
// may hold at once (docs/kubernetes.md), by docs/scaling.md's "Connection
// budget": every Deployment at its most replicas, each pod its
// DATABASE_MAX_CONNS plus, for workers and the scheduler (River clients
// that work queues), the LISTEN connection River takes out of the pool;
// and the same at the fewest replicas the autoscalers keep (KEDA's
// minReplicaCount, an HPA's minReplicas), which must stay within
// connectionBudget and, with the migrate Job's pool, one connection per
// KEDA PostgreSQL trigger, tierctl sessions and otherLogins, within a
// stock server's 97.
func TestConnectionBudget(t *testing.T) {
	t.Parallel()

	want := map[string][2]int{"prod": {70, 154}, "prod-split": {70, 224}} // {fewest, most}
	for _, b := range builds(t) {
		n, ok := want[b.variant.name]
		if !ok {
			continue
		}
		bounds := map[string][2]int32{}
		triggers := 0
		for _, s := range scalers(t, b) {
			bounds[s.target] = [2]int32{s.min, s.max}
			for _, tr := range s.triggers {
				if tr.source == "postgresql" {
					triggers++ // KEDA keeps a pool per trigger: about one connection
				}
			}
		}
		var total [2]int
		for _, d := range all[*appsv1.Deployment](b) {
			replicas, ok := bounds[d.Name]
			if !ok {
				require.NotNil(t, d.Spec.Replicas, d.Name)
				replicas = [2]int32{*d.Spec.Replicas, *d.Spec.Replicas}
			}
			c := d.Spec.Template.Spec.Containers[0]
			env := containerEnv(t, b, c)
			conns, err := strconv.Atoi(env["DATABASE_MAX_CONNS"])
			require.NoError(t, err)
			proc, err := loadProcess(t, c, env)
			require.NoError(t, err)
			if proc.binary == "worker" || proc.binary == "scheduler" {
				conns++ // LISTEN
			}
			for i := range total {
				total[i] += int(replicas[i]) * conns
			}
		}
		require.Equal(t, n, total, b.variant.name)
		require.LessOrEqual(t, total[0], connectionBudget, "%s at its fewest replicas", b.variant.name)

		jobs := all[*batchv1.Job](b) // the migrate Job
		require.Len(t, jobs, 1, b.variant.name)
		migratePool, err := strconv.Atoi(containerEnv(t, b, jobs[0].Spec.Template.Spec.Containers[0])["DATABASE_MAX_CONNS"])
		require.NoError(t, err)
		require.Equal(t, 4, migratePool, b.variant.name)
		require.Equal(t, 8, triggers, b.variant.name)
		others := migratePool + triggers + tierctlSessions + otherLogins
		require.Equal(t, 25, others, b.variant.name)
		require.LessOrEqual(t, total[0]+others, stockLogins, "%s at its fewest replicas, with everything else", b.variant.name)
	}
}

// TestKEDAConnectsWithTheSecret: every PostgreSQL trigger authenticates
// with a TriggerAuthentication of the build, which hands KEDA's scaler
// (parameter connection) the Secret's DATABASE_URL.
func TestKEDAConnectsWithTheSecret(t *testing.T) {
	t.Parallel()

	checked := 0
	for _, b := range builds(t) {
		auths := map[string]triggerAuthentication{}
		for _, o := range b.objects {
			if o.kind == "TriggerAuthentication" {
				var ta triggerAuthentication
				require.NoError(t, json.Unmarshal(o.raw, &ta))
				auths[ta.Metadata.Name] = ta
			}
		}
		for _, s := range scalers(t, b) {
			if s.keda == nil {
				continue
			}
			for _, tr := range s.keda.Spec.Triggers {
				where := b.variant.name + ": " + s.name + " " + tr.Name
				if tr.Type != "postgresql" {
					require.Nil(t, tr.AuthenticationRef, where)
					continue
				}
				require.NotNil(t, tr.AuthenticationRef, where)
				require.Contains(t, []string{"", "TriggerAuthentication"}, tr.AuthenticationRef.Kind, where)
				ta, ok := auths[tr.AuthenticationRef.Name]
				require.True(t, ok, "%s: no TriggerAuthentication %s", where, tr.AuthenticationRef.Name)
				require.Len(t, ta.Spec.SecretTargetRef, 1, where)
				ref := ta.Spec.SecretTargetRef[0]
				require.Equal(t, "connection", ref.Parameter, where)
				require.Equal(t, "DATABASE_URL", ref.Key, where)
				// The Secret's final (hashed) name, which the pods read too.
				require.Contains(t, secretData(t, b, ref.Name), "DATABASE_URL", where)
				require.NotContains(t, tr.Metadata, "connection", "%s: no connection string in the trigger", where)
				checked++
			}
		}
	}
	require.Positive(t, checked)
}

// switches are the commands docs/kubernetes.md gives to run before applying
// prod with another autoscaling component, or prod-split after prod:
// `kubectl apply` deletes nothing, and what it leaves would scale the same
// Deployments a second time (or run the Deployment the split replaces).
var switches = []struct{ from, to, command string }{
	{"prod", "prod with hpa", "kubectl -n tierq delete scaledobjects,triggerauthentications -l app.kubernetes.io/part-of=tierq"},
	{"prod with keda-prometheus", "prod with hpa", "kubectl -n tierq delete scaledobjects,triggerauthentications -l app.kubernetes.io/part-of=tierq"},
	{"prod with hpa", "prod", "kubectl -n tierq delete hpa -l app.kubernetes.io/part-of=tierq"},
	{"prod with hpa", "prod with keda-prometheus", "kubectl -n tierq delete hpa -l app.kubernetes.io/part-of=tierq"},
	{"prod", "prod with keda-prometheus", "kubectl -n tierq delete triggerauthentications -l app.kubernetes.io/part-of=tierq"},
	{"prod", "prod-split", "kubectl -n tierq delete scaledobject/worker-analyzer deployment/worker-analyzer pdb/worker-analyzer"},
}

// kubectlKinds are the resource names the commands of switches use.
var kubectlKinds = map[string]string{
	"scaledobject": "ScaledObject", "scaledobjects": "ScaledObject",
	"triggerauthentications": "TriggerAuthentication",
	"hpa":                    "HorizontalPodAutoscaler",
	"deployment":             "Deployment",
	"pdb":                    "PodDisruptionBudget",
}

// deletes says whether `kubectl delete` as command deletes o: its kinds
// with a label selector (which the tests' objects all carry), or kind/name
// pairs.
func deletes(t *testing.T, command string, o object) bool {
	t.Helper()
	args, ok := strings.CutPrefix(command, "kubectl -n tierq delete ")
	require.True(t, ok, command)
	if what, selector, ok := strings.Cut(args, " -l "); ok {
		k, v, _ := strings.Cut(selector, "=")
		if o.labels[k] != v {
			return false
		}
		for _, kind := range strings.Split(what, ",") {
			require.Contains(t, kubectlKinds, kind, command)
			if kubectlKinds[kind] == o.kind {
				return true
			}
		}
		return false
	}
	for _, ref := range strings.Fields(args) {
		kind, name, ok := strings.Cut(ref, "/")
		require.True(t, ok, command)
		require.Contains(t, kubectlKinds, kind, command)
		if kubectlKinds[kind] == o.kind && name == o.name {
			return true
		}
	}
	return false
}

// TestSwitchingLeavesNothingBehind: for each switch docs/kubernetes.md
// describes, its command deletes exactly the objects of the build switched
// from that the build switched to does not have (kubectl apply leaves
// them), and nothing the new build applies.
func TestSwitchingLeavesNothingBehind(t *testing.T) {
	t.Parallel()

	docs, err := os.ReadFile("../../docs/kubernetes.md")
	require.NoError(t, err)
	byName := map[string]*build{}
	for _, b := range builds(t) {
		byName[b.variant.name] = b
	}
	for _, sw := range switches {
		where := sw.from + " -> " + sw.to
		require.True(t, strings.Contains(string(docs), sw.command), "%s: docs/kubernetes.md gives %q", where, sw.command)
		from, to := byName[sw.from], byName[sw.to]
		kept := map[string]bool{}
		for _, o := range to.objects {
			kept[o.kind+"/"+o.name] = true
			require.False(t, deletes(t, sw.command, o), "%s: deletes %s/%s, which %s applies", where, o.kind, o.name, sw.to)
		}
		left := 0
		for _, o := range from.objects {
			if kept[o.kind+"/"+o.name] {
				continue
			}
			require.True(t, deletes(t, sw.command, o), "%s: %s/%s is left behind", where, o.kind, o.name)
			left++
		}
		require.Positive(t, left, where)
	}
}

// TestExampleNeedsKEDAsTriggerAuthentication: the thumbnail example's
// ScaledObject authenticates with components/keda's TriggerAuthentication,
// so with another autoscaling component it refers to nothing
// (docs/kubernetes.md, "Adding a service").
func TestExampleNeedsKEDAsTriggerAuthentication(t *testing.T) {
	t.Parallel()

	b := buildVariant(t, variant{name: "prod with keda-prometheus and the example", overlay: "overlays/prod", edits: map[string][2]string{
		"overlays/prod/kustomization.yaml": {componentsLine, "components:\n  - ../../components/keda-prometheus\n  - ../../examples/thumbnail\n"},
	}})
	refs := 0
	for _, s := range scalers(t, b) {
		for _, tr := range s.keda.Spec.Triggers {
			if tr.AuthenticationRef != nil {
				require.Equal(t, "worker-thumbnailer", s.name)
				require.Equal(t, "tierq-database", tr.AuthenticationRef.Name)
				refs++
			}
		}
	}
	require.Equal(t, 4, refs)
	for _, o := range b.objects {
		require.NotEqual(t, "TriggerAuthentication", o.kind, "keda-prometheus has none")
	}
	require.Contains(t, string(readFile(t, "components/keda/triggerauthentication.yaml")), "name: tierq-database")
}

// readFile returns the file at path, under deploy/kubernetes.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return raw
}
