package bench

import (
	"context"
	"fmt"
)

// Report holds the results of the scenarios that ran; it is the JSON object
// tierctl bench --json prints.
type Report struct {
	Isolation  *IsolationResult  `json:"isolation,omitempty"`
	Throughput *ThroughputResult `json:"throughput,omitempty"`
	Sweeps     *SweepsResult     `json:"sweeps,omitempty"`
	DLQ        *DLQResult        `json:"dlq,omitempty"`
	Insert     *InsertResult     `json:"insert,omitempty"`
	// Targets lists every target checked, met or not.
	Targets []Target `json:"targets"`
}

// Target is one goal of docs/benchmarks.md and whether this run met it.
type Target struct {
	Scenario string  `json:"scenario"`
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Goal     string  `json:"goal"`
	Met      bool    `json:"met"`
}

// Row is one line of the result table.
type Row struct {
	Scenario, Measure, Value, Target string
	Met                              bool
}

// Run runs scenario and adds its result and targets to r.
func Run(ctx context.Context, scenario string, opts Options, r *Report) error {
	switch scenario {
	case "isolation":
		res, err := Isolation(ctx, opts)
		if err != nil {
			return err
		}
		r.Isolation = &res
		r.atMost("isolation", "ratio", res.Ratio, 1.1)
		r.atMost("isolation", "vs_river_defaults", res.VsRiverDefaults, 0.2)
	case "throughput":
		res, err := Throughput(ctx, opts)
		if err != nil {
			return err
		}
		r.Throughput = &res
		r.atLeast("throughput", "ratio", res.Ratio, 0.95)
		r.atLeast("throughput", "adr_bound_ratio", res.ADRBoundRatio, 0.9)
	default:
		return fmt.Errorf("unknown scenario %q", scenario)
	}
	return nil
}

func (r *Report) atMost(scenario, name string, v, goal float64) {
	r.Targets = append(r.Targets, Target{Scenario: scenario, Name: name, Value: v, Goal: fmt.Sprintf("<= %g", goal), Met: v <= goal})
}

func (r *Report) atLeast(scenario, name string, v, goal float64) {
	r.Targets = append(r.Targets, Target{Scenario: scenario, Name: name, Value: v, Goal: fmt.Sprintf(">= %g", goal), Met: v >= goal})
}

// Rows is the result table: every measure, with its target where it has one.
func (r Report) Rows() []Row {
	var rows []Row
	add := func(scenario, measure string, v float64, unit string) {
		row := Row{Scenario: scenario, Measure: measure, Value: fmt.Sprintf("%g%s", v, unit)}
		for _, t := range r.Targets {
			if t.Scenario == scenario && t.Name == measure {
				row.Target, row.Met = t.Goal, t.Met
			}
		}
		rows = append(rows, row)
	}
	if i := r.Isolation; i != nil {
		add("isolation", "p50_idle_ms", i.P50IdleMs, " ms")
		add("isolation", "p99_idle_ms", i.P99IdleMs, " ms")
		add("isolation", "p50_ms", i.P50Ms, " ms")
		add("isolation", "p95_ms", i.P95Ms, " ms")
		add("isolation", "p99_ms", i.P99Ms, " ms")
		add("isolation", "ratio", i.Ratio, "")
		add("isolation", "river_defaults_p50_ms", i.RiverDefaultsP50Ms, " ms")
		add("isolation", "river_defaults_p99_ms", i.RiverDefaultsP99Ms, " ms")
		add("isolation", "vs_river_defaults", i.VsRiverDefaults, "")
		add("isolation", "backlog_left", i.BacklogLeft, " jobs")
	}
	if t := r.Throughput; t != nil {
		add("throughput", "tierq_jobs_per_s", t.TierqJobsPerS, "")
		add("throughput", "bare_jobs_per_s", t.BareJobsPerS, "")
		add("throughput", "ratio", t.Ratio, "")
		add("throughput", "adr_jobs_per_s", t.ADRJobsPerS, "")
		add("throughput", "adr_bound_jobs_per_s", t.ADRBoundJobsPerS, "")
		add("throughput", "adr_bound_ratio", t.ADRBoundRatio, "")
	}
	return rows
}

// Placeholders until each scenario lands.
type (
	SweepsResult     struct{}
	DLQResult        struct{}
	InsertResult     struct{}
)
