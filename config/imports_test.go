package config_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// glue are the packages that may depend on package config or the reference
// app (package jobs, internal/refapp): commands, examples, benchmarks,
// tierctl's commands and the reference app's own wiring and test helpers.
// Every other package of the module is library, configured in Go.
//
// ctl is glue by design, not an exception to fix: it is tierctl's
// command-line layer, whose configuration is the environment
// (ctl.Config.Environ), read with config.CLI so that tierctl's variables
// and exit-2 messages are config's (ctl's package doc, docs/library.md §7).
// It must still not depend on the reference app (cmd/tierctl adds its
// commands through ctl.Config): TestNoLibraryPackageImportsConfig checks
// that.
var glue = regexp.MustCompile(`^github\.com/tierq/tierq/(config|jobs|jobs/.+|bench|ctl|cmd/.+|examples/.+|chaos(/.+)?|internal/(refapp|testdb|workertest|proctest|upgradetest|runscript|librarydocs|seed)(/.+)?)$`)

// TestNoLibraryPackageImportsConfig: no library package (worker, scheduler,
// api, fairshare, producer, …) has config, jobs (or a package under it) or
// internal/refapp among its dependencies, and ctl none but config (issue 31): package config only translates the
// environment into their Configs.
func TestNoLibraryPackageImportsConfig(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "github.com/tierq/tierq/...").Output()
	require.NoError(t, err)
	// forbidden is config, jobs and its subpackages (jobs/jobsconfig) and
	// internal/refapp; reference is forbidden's reference app alone.
	forbidden := regexp.MustCompile(`^github\.com/tierq/tierq/(config|jobs|jobs/.+|internal/refapp)$`)
	reference := regexp.MustCompile(`^github\.com/tierq/tierq/(jobs|jobs/.+|internal/refapp)$`)
	var library []string
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if fields[0] == "github.com/tierq/tierq/ctl" {
			for _, dep := range fields[1:] {
				require.False(t, reference.MatchString(dep), "ctl depends on %s, of the reference app", dep)
			}
		}
		if glue.MatchString(fields[0]) {
			continue
		}
		library = append(library, fields[0])
		for _, dep := range fields[1:] {
			require.False(t, forbidden.MatchString(dep), "library package %s depends on %s", fields[0], dep)
		}
	}
	for _, want := range []string{"worker", "scheduler", "api", "fairshare", "producer", "service"} {
		require.Contains(t, library, "github.com/tierq/tierq/"+want)
	}
}
