// Package promtest reads a Prometheus registry in tests as a flat map, so a
// test can compare everything a process exported with what it expects.
package promtest

import (
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Values gathers g and returns each counter and gauge sample, and each
// histogram's sample count (as name_count), of the families whose names
// start with prefix, keyed `name{label=value,...}` with labels sorted.
func Values(t testing.TB, g prometheus.Gatherer, prefix string) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			key := "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				got[f.GetName()+key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[f.GetName()+key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[f.GetName()+"_count"+key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return got
}

// Text parses body, a /metrics page in Prometheus' text format as a process
// serves it, and returns what Values returns for a registry holding those
// samples: a test that scrapes a running process compares the same map.
func Text(t testing.TB, body, prefix string) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, body)
	}
	return Values(t, prometheus.GathererFunc(gathered(slices.Collect(maps.Values(families)))), prefix)
}

// gathered is a Gather function returning families as they are.
func gathered[F any](families F) func() (F, error) {
	return func() (F, error) { return families, nil }
}

// Recorder is a prometheus.Registerer that keeps what is registered on it,
// so that a test can ask each collector to describe itself (Described).
type Recorder struct{ Collectors []prometheus.Collector }

func (r *Recorder) Register(c prometheus.Collector) error {
	r.Collectors = append(r.Collectors, c)
	return nil
}

func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	r.Collectors = append(r.Collectors, cs...)
}

func (r *Recorder) Unregister(prometheus.Collector) bool { return false }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

// Describer is what describes metrics: a prometheus.Collector, or a type
// with only a Describe method (the API's metrics).
type Describer interface{ Describe(chan<- *prometheus.Desc) }

// Described returns the metric families described by what was registered
// on r and by more, each with its label names, read from their own
// descriptions (prometheus.Desc has no getters: its String form is parsed).
func (r *Recorder) Described(t testing.TB, more ...Describer) map[string][]string {
	t.Helper()
	all := make([]Describer, 0, len(r.Collectors)+len(more))
	for _, c := range r.Collectors {
		all = append(all, c)
	}
	all = append(all, more...)
	descs := make(chan *prometheus.Desc)
	go func() {
		defer close(descs)
		for _, d := range all {
			d.Describe(descs)
		}
	}()
	out := map[string][]string{}
	for d := range descs {
		name := descName.FindStringSubmatch(d.String())
		labels := descLabels.FindStringSubmatch(d.String())
		if name == nil || labels == nil {
			t.Errorf("unreadable metric description: %s", d)
			continue
		}
		out[name[1]] = nil
		if labels[1] != "" {
			out[name[1]] = strings.Split(labels[1], ",")
		}
	}
	return out
}
