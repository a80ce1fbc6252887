// Package promtest reads a Prometheus registry in tests as a flat map, so a
// test can compare everything a process exported with what it expects.
package promtest

import (
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
