package runscript

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sessionMarker is the line before README.md's session block.
const sessionMarker = "<!-- session: TestReadmeSession"

// expectPrefix starts a line of the block that is the output expected of
// the command before it; "…" in it matches anything.
const expectPrefix = "# →"

// stepMark is what the session script prints between two commands' outputs.
const stepMark = "@@tierq-session-step@@"

// step is a group of commands of the session and the output expected of
// them.
type step struct {
	commands []string
	want     []string
}

// readSession reads README.md's session block: the script to run (each
// group of expected lines replaced by a print of stepMark) and its steps.
func readSession(t *testing.T, readme string) (string, []step) {
	t.Helper()
	f, err := os.Open(readme)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), sessionMarker) {
	}
	require.True(t, sc.Scan(), "no %q line in %s", sessionMarker, readme)
	require.Equal(t, "```sh", sc.Text(), "the line after the session marker")

	var (
		script strings.Builder
		steps  []step
		cur    step
	)
	closed := false
	for sc.Scan() {
		line := sc.Text()
		if line == "```" {
			closed = true
			break
		}
		if want, ok := strings.CutPrefix(line, expectPrefix); ok {
			if len(cur.want) == 0 {
				script.WriteString("echo " + stepMark + "\n")
			}
			cur.want = append(cur.want, strings.TrimPrefix(want, " "))
			continue
		}
		if len(cur.want) > 0 {
			steps = append(steps, cur)
			cur = step{}
		}
		if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "#") {
			cur.commands = append(cur.commands, line)
		}
		script.WriteString(line + "\n")
	}
	require.NoError(t, sc.Err())
	require.True(t, closed, "the session block is not closed")
	if len(cur.want) == 0 {
		require.Empty(t, cur.commands, "commands after the last expected output: %q", cur.commands)
	} else {
		steps = append(steps, cur)
	}
	return script.String(), steps
}

// pattern is an expected line as a regular expression: "…" is anything.
func pattern(want string) *regexp.Regexp {
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// TestReadmeSession runs README.md's HTTP session as a newcomer does: make
// run (scripts/run.sh, the real worker, scheduler and API binaries, without
// the demo), then the two export lines it printed and the session's
// commands pasted into a second shell (bash) in the checkout. Each command's
// output, stdout and stderr, must be what the README shows after it; the
// session may print nothing the README does not show. Then Ctrl-C stops make
// run cleanly.
func TestReadmeSession(t *testing.T) {
	b := setup(t)
	for _, tool := range []string{"curl", "jq", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's session needs %s", tool)
		}
	}
	session, steps := readSession(t, filepath.Join(b.root, "README.md"))
	require.Len(t, steps, 12, "steps of the session (a new one: count it here)")

	s := b.start(t, "DEMO=off", "DEMO_JOBS=4")
	s.waitOutput("watching queues", 3*time.Minute)
	// make run's own analyses done: the session's targets are new jobs,
	// not duplicates of queued ones.
	s.waitFor(60*time.Second, "make run's analyses finished", func() bool {
		return s.counted(1, `SELECT (count(*) = 0)::int FROM river_job WHERE kind IN ('analysis', 'specview') AND state NOT IN ('completed', 'cancelled', 'discarded')`)
	})

	exports := s.lines("  export ")
	require.Len(t, exports, 2, "the export lines make run prints; output:\n%s", s.out)
	paste := strings.TrimSpace(exports[0]) + "\n" + strings.TrimSpace(exports[1]) + "\n" +
		// The tierctl on the pasted PATH is the one make run built.
		`[ "$(command -v tierctl)" = "` + filepath.Join(b.bin, "tierctl") + `" ] || { echo "tierctl on PATH: $(command -v tierctl)"; exit 1; }` + "\n"

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -eo pipefail\n"+paste+session) //nolint:gosec // the README's own commands
	cmd.Dir = b.root
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LANG=C.UTF-8", "TERM=dumb"}
	cmd.WaitDelay = 5 * time.Second
	raw, err := cmd.CombinedOutput()
	out := string(raw)
	require.NoError(t, err, "the session failed; its output:\n%s\nmake run's:\n%s", out, s.out)

	segments := strings.Split(out, stepMark+"\n")
	require.Len(t, segments, len(steps)+1, "the session's output:\n%s", out)
	require.Empty(t, segments[len(steps)], "output after the session's last documented output")
	for i, st := range steps {
		got := strings.Split(strings.TrimSuffix(segments[i], "\n"), "\n")
		if segments[i] == "" {
			got = nil
		}
		ok := len(got) == len(st.want)
		for j := 0; ok && j < len(got); j++ {
			ok = pattern(st.want[j]).MatchString(got[j])
		}
		if !ok {
			t.Errorf("step %d of the README's session:\n%s\nprinted:\n%s\nthe README shows:\n%s",
				i+1, strings.Join(st.commands, "\n"), strings.Join(got, "\n"), strings.Join(st.want, "\n"))
		}
	}

	// The console make run prints answers with the admin token and any
	// user name.
	console := s.lines("Console: ")
	require.Len(t, console, 1, "make run's console line; output:\n%s", s.out)
	m := regexp.MustCompile(`^Console: (http://\S+/console/) \(user: your name, .*; password: (\S+)\)$`).FindStringSubmatch(console[0])
	require.NotNil(t, m, "console line %q", console[0])
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, m[1], nil)
	require.NoError(t, err)
	req.SetBasicAuth("readme", m[2])
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", page)
	require.Contains(t, string(page), "· tierq console</title>")

	procs := s.descendants()
	s.signal(syscall.SIGINT)
	s.wait(60 * time.Second)
	s.requireGone(procs)
	s.requirePortFree()
	require.Equal(t, 0, s.count(`SELECT count(*) FROM river_job WHERE state = 'running'`), "jobs left running")
}
