package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLimitsRatiosArePerRun: each throughput ratio of the limits scenario
// is the median of the runs' own ratios, not the ratio of the variants'
// medians; a run whose denominator ran nothing is left out.
func TestLimitsRatiosArePerRun(t *testing.T) {
	t.Parallel()
	res := LimitsResult{variantRuns: map[string][]limitsVariantRun{
		variantCaps:     {{jobsPerS: 300}, {jobsPerS: 320}, {jobsPerS: 280}},
		variantNoLimits: {{jobsPerS: 310}, {jobsPerS: 300}, {jobsPerS: 0}},
	}}
	require.Equal(t, []float64{0.968, 1.067, 0}, res.ratioRuns(variantCaps, variantNoLimits))

	// The same runs through the scenario's summary: medians of per-run
	// ratios. Run 1 alone would fail 0.95's target, run 2 alone pass; the
	// ratio of the medians (300 / 300 = 1) hides that they disagree.
	res.summarizeRatios()
	require.Equal(t, []float64{0.968, 1.067, 0}, res.WorkConservingRatioRuns)
	require.InDelta(t, 1.0175, res.WorkConservingRatio, 0.001, "the median of 0.968 and 1.067")
	require.Empty(t, res.NoLimitsRatioRuns, "no run of trigger_off")
	require.Zero(t, res.NoLimitsRatio)
}
