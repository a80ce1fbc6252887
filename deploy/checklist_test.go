package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestChecklistCoversEveryAlert: docs/operations.md's production checklist
// has a row, with what to do, for exactly the rules of
// deploy/prometheus/alerts.yml, with each rule's severity.
func TestChecklistCoversEveryAlert(t *testing.T) {
	t.Parallel()

	raw, err := os.ReadFile("prometheus/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	want := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			want[r.Alert] = r.Labels["severity"]
		}
	}
	require.Len(t, want, 11)

	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## Production checklist\n")
	require.True(t, ok)
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `(Tierq\\w+)` \\| (\\w+) \\| ([^|]+) \\| ([^|]+) \\|$")
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		require.NotContains(t, got, m[1], "one row per alert")
		got[m[1]] = m[2]
		require.Greater(t, len(strings.TrimSpace(m[4])), 10, "%s: what to do", m[1])
	}
	require.Equal(t, want, got)
}
