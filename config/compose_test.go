package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
)

// TestComposeFileIsValid checks docker-compose.yml without a Docker engine:
// it parses, has the services the README promises, and every worker service
// gets a configuration that config.Load accepts.
func TestComposeFileIsValid(t *testing.T) {
	t.Parallel()

	raw, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Build       any               `yaml:"build"`
			Entrypoint  []string          `yaml:"entrypoint"`
			Environment map[string]string `yaml:"environment"`
			DependsOn   map[string]any    `yaml:"depends_on"`
			Deploy      struct {
				Replicas int `yaml:"replicas"`
			} `yaml:"deploy"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &compose)) // resolves anchors and merge keys

	for _, name := range []string{"postgres", "migrate", "worker-analyzer", "worker-specgen", "scheduler", "api"} {
		require.Contains(t, compose.Services, name)
	}
	// River UI is served by the api service (/riverui/), not by a container
	// of its own.
	for name, s := range compose.Services {
		require.NotContains(t, s.Image, "riverui", name)
	}
	require.NotContains(t, compose.Services, "riverui")
	require.Equal(t, []string{"/usr/local/bin/tierctl", "migrate"}, compose.Services["migrate"].Entrypoint)

	for name, svc := range map[string]string{"worker-analyzer": "analyzer", "worker-specgen": "specgen"} {
		s := compose.Services[name]
		require.Contains(t, s.DependsOn, "migrate", name)
		require.Equal(t, svc, s.Environment["WORKER_SERVICE"], name)
		_, err := loadWorker(t, composeEnviron(s.Environment))
		require.NoError(t, err, name)
	}

	scheduler := compose.Services["scheduler"]
	require.Equal(t, []string{"/usr/local/bin/scheduler"}, scheduler.Entrypoint)
	require.Contains(t, scheduler.DependsOn, "migrate")
	require.Equal(t, 2, scheduler.Deploy.Replicas, "two scheduler replicas for failover")
	_, err = config.Load[config.Scheduler](composeEnviron(scheduler.Environment))
	require.NoError(t, err, "scheduler")

	// The API has no default tokens: compose refuses to start it (":?")
	// until the operator sets them; with them set, the configuration loads.
	apiSvc := compose.Services["api"]
	require.Equal(t, []string{"/usr/local/bin/api"}, apiSvc.Entrypoint)
	require.Contains(t, apiSvc.DependsOn, "migrate")
	require.True(t, strings.HasPrefix(apiSvc.Environment["API_TOKEN"], "${API_TOKEN:?"), "no default producer token")
	require.True(t, strings.HasPrefix(apiSvc.Environment["API_ADMIN_TOKEN"], "${API_ADMIN_TOKEN:?"), "no default admin token")
	environ := composeEnviron(apiSvc.Environment)
	environ = append(environ, "API_TOKEN=operator-set-token-0123", "API_ADMIN_TOKEN=operator-set-admin-0123")
	cfg, err := config.Load[config.API](environ)
	require.NoError(t, err, "api")
	require.Equal(t, "0.0.0.0:8081", cfg.Addr, "all interfaces inside the container")

	// The API and the analyzer confine analysis targets to the same real
	// root, not to "/".
	// (ANALYSIS_ROOTS is the reference app's own section.)
	analysis, err := config.LoadSection[jobsconfig.AnalysisConfig](environ)
	require.NoError(t, err, "api")
	require.Equal(t, jobs.AnalysisRoots{"/srv/repos"}, analysis.Roots, "api")
	analysis, err = config.LoadSection[jobsconfig.AnalysisConfig](composeEnviron(compose.Services["worker-analyzer"].Environment))
	require.NoError(t, err, "worker-analyzer")
	require.Equal(t, jobs.AnalysisRoots{"/srv/repos"}, analysis.Roots, "worker-analyzer")
	_, err = jobsconfig.LoadMaintenance(composeEnviron(scheduler.Environment), &config.Scheduler{})
	require.NoError(t, err, "scheduler")
}

// composeEnviron is a service's environment as the process would see it.
func composeEnviron(env map[string]string) []string {
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+os.Expand(v, composeDefault))
	}
	return environ
}

// composeDefault resolves ${VAR:-default} the way compose does with VAR unset.
func composeDefault(expr string) string {
	if _, def, ok := strings.Cut(expr, ":-"); ok {
		return def
	}
	return ""
}
