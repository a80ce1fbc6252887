package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLimitsRatiosArePerRun: each throughput ratio of the limits scenario
// is the median of the runs' own ratios, not the ratio of the variants'
// medians; a run whose denominator ran nothing is left out, one whose
// numerator ran nothing counts as 0.
func TestLimitsRatiosArePerRun(t *testing.T) {
	t.Parallel()
	res := LimitsResult{variantRuns: map[string][]limitsVariantRun{
		variantCaps:     {{jobsPerS: 300}, {jobsPerS: 320}, {jobsPerS: 280}, {jobsPerS: 0}},
		variantNoLimits: {{jobsPerS: 310}, {jobsPerS: 300}, {jobsPerS: 0}, {jobsPerS: 290}},
	}}
	require.Equal(t, []float64{0.968, 1.067, 0}, res.ratioRuns(variantCaps, variantNoLimits))

	// The same runs through the scenario's summary: the median of the
	// runs' own ratios (0, 0.968, 1.067), where the ratio of the variants'
	// medians would be 290 / 300.
	res.summarizeRatios()
	require.Equal(t, []float64{0.968, 1.067, 0}, res.WorkConservingRatioRuns)
	require.Equal(t, 0.968, res.WorkConservingRatio)
	require.Empty(t, res.NoLimitsRatioRuns, "no run of trigger_off")
	require.Zero(t, res.NoLimitsRatio)
}
