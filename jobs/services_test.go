package jobs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
)

// TestRegistryIsADR16s: the reference app's registry has ADR-16's two
// services, their queues, kinds and worker counts.
func TestRegistryIsADR16s(t *testing.T) {
	t.Parallel()
	r, err := jobs.Registry(jobs.Deps{})
	require.NoError(t, err)
	require.Equal(t, []string{"analyzer", "specgen"}, r.Names())
	require.Equal(t, []string{
		"analysis_priority", "analysis_default", "analysis_scheduled",
		"specview_priority", "specview_default", "specview_scheduled",
	}, r.Queues())
	require.Equal(t, []string{"analysis", "specview"}, r.KindNames())
	analyzer, _ := r.Lookup("analyzer")
	specgen, _ := r.Lookup("specgen")
	require.Equal(t, service.ClassWorkers{Priority: 5, Default: 3, Scheduled: 2}, analyzer.Workers())
	require.Equal(t, service.ClassWorkers{Priority: 3, Default: 2, Scheduled: 1}, specgen.Workers())
	require.Equal(t, "ANALYZER_", analyzer.EnvPrefix())
	s, class, ok := r.ForQueue("specview_scheduled")
	require.True(t, ok)
	require.Equal(t, specgen, s)
	require.Equal(t, routing.Scheduled, class)
}
