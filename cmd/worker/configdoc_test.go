package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
)

// TestConfigurationErrorsDocumented runs the example of docs/operations.md
// ("Configuration errors") through the real process: the variables on its
// `$` line give exactly the line under it, with exit status 2.
func TestConfigurationErrorsDocumented(t *testing.T) {
	t.Parallel()

	raw, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(raw), "\n## Configuration errors\n")
	require.True(t, ok)
	_, block, ok := strings.Cut(section, "```\n$ ")
	require.True(t, ok, "no example after the heading")
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)
	command, want, ok := strings.Cut(block, "\n")
	require.True(t, ok)

	fields := strings.Fields(command)
	require.Equal(t, "worker", fields[len(fields)-1], command)
	environ := fields[:len(fields)-1]
	require.Equal(t, want, proctest.RunExit(t, 2, environ...))
	require.Equal(t, 1, strings.Count(want, "\n"), "one line")
	require.Contains(t, want, `and 1000; ANALYZER_QUEUE_PRIORITY_WORKERS=`, "separated by \"; \"")
}
