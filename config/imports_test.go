package config_test

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// glue are the packages that may depend on package config or the reference
// app (package jobs, internal/refapp): commands, examples, benchmarks,
// tierctl's commands and the reference app's own wiring and test helpers.
// Every other package of the module is library, configured in Go.
var glue = regexp.MustCompile(`^github\.com/tierq/tierq/(config|jobs|jobs/.+|bench|ctl|cmd/.+|examples/.+|chaos(/.+)?|internal/(refapp|testdb|workertest|proctest|upgradetest|runscript|librarydocs|seed)(/.+)?)$`)

// TestNoLibraryPackageImportsConfig: no library package (worker, scheduler,
// api, fairshare, producer, …) has config, jobs or internal/refapp among
// its dependencies (issue 31): package config only translates the
// environment into their Configs.
func TestNoLibraryPackageImportsConfig(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "github.com/tierq/tierq/...").Output()
	require.NoError(t, err)
	forbidden := []string{"github.com/tierq/tierq/config", "github.com/tierq/tierq/jobs", "github.com/tierq/tierq/internal/refapp"}
	var library []string
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || glue.MatchString(fields[0]) {
			continue
		}
		library = append(library, fields[0])
		for _, dep := range fields[1:] {
			require.False(t, slices.Contains(forbidden, dep), "library package %s depends on %s", fields[0], dep)
		}
	}
	for _, want := range []string{"worker", "scheduler", "api", "fairshare", "producer", "service"} {
		require.Contains(t, library, "github.com/tierq/tierq/"+want)
	}
}
