// Package promtest reads a Prometheus registry in tests as a flat map, so a
// test can compare everything a process exported with what it expects.
package promtest

import (
	"maps"
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
