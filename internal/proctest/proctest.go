// Package proctest runs a command's main as a real child process in tests:
// the test binary re-executes itself with TIERQ_RUN_MAIN=1, and the package's
// TestMain calls main instead of the tests. Signals, exit status and all.
package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// RunMain runs main and exits when this process is a child started by
// Command; it returns otherwise. Call it first in TestMain.
func RunMain(main func()) {
	if os.Getenv("TIERQ_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
}

// Buffer is a bytes.Buffer safe to read while the process writes to it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Command returns the child process with exactly environ (plus PATH), its
// stdout and stderr captured in the returned buffer.
func Command(t testing.TB, environ ...string) (*exec.Cmd, *Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0]) //nolint:gosec // the test binary itself
	cmd.Env = append([]string{"TIERQ_RUN_MAIN=1", "PATH=" + os.Getenv("PATH")}, environ...)
	out := &Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out
}

// RunExit runs the child process with environ to its end and returns its
// output, failing t unless it exits with status code.
func RunExit(t testing.TB, code int, environ ...string) string {
	t.Helper()
	cmd, out := Command(t, environ...)
	err := cmd.Run()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != code {
		t.Fatalf("want exit status %d, got %v; output:\n%s", code, err, out.String())
	}
	return out.String()
}

// WaitOutput waits until the process has written want, failing t after
// timeout.
func WaitOutput(t testing.TB, out *Buffer, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in output after %s:\n%s", want, timeout, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var metricsAddr = regexp.MustCompile(`metrics listening"? addr=(\S+)`)

// MetricsURL waits for a process started with METRICS_ADDR (text logs) to
// log where it serves metrics and returns the /metrics URL.
func MetricsURL(t testing.TB, out *Buffer) string {
	t.Helper()
	WaitOutput(t, out, "metrics listening", 20*time.Second)
	m := metricsAddr.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no metrics address in output:\n%s", out.String())
	}
	return "http://" + m[1] + "/metrics"
}

// Scrape returns the body of one GET of url, failing t unless it is a 200.
func Scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec,noctx // a test's loopback URL
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: status %d, %v", url, resp.StatusCode, err)
	}
	return string(body)
}

// Deployment is a process run in-process, as its main would run it: Run is
// the process's run function (refapp.RunWorker, …), Env its variables on
// top of the ones every deployment shares.
type Deployment struct {
	Name string
	Run  func(ctx context.Context, environ []string, stdout io.Writer) error
	Env  []string
}

// Start runs each deployment in a goroutine with common and its own Env,
// its output in a Buffer of its own (returned by name), until the test
// ends: then it cancels their context and requires that each returned nil,
// showing the output of any that did not.
func Start(t testing.TB, common []string, deployments ...Deployment) map[string]*Buffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, len(deployments))
	logs := map[string]*Buffer{}
	for _, d := range deployments {
		out := &Buffer{}
		logs[d.Name] = out
		go func() {
			err := d.Run(ctx, append(slices.Clone(common), d.Env...), out)
			if err != nil {
				err = fmt.Errorf("%s: %w\n%s", d.Name, err, out.String())
			}
			done <- err
		}()
	}
	t.Cleanup(func() {
		cancel()
		for range deployments {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})
	return logs
}

// CallJSON sends a request to url with body as JSON (none when nil) and
// token as its bearer token (none when empty), and returns the status and
// the JSON object answered (nil when the body is not an object).
func CallJSON(t testing.TB, method, url, token string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("encode request: %v", err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, url, err)
	}
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, raw)
		}
	}
	return resp.StatusCode, out
}

// WaitReturn cancels an in-process run (worker.Run, scheduler.Run,
// api.Run, …) with cancel and requires that it return nil on done within
// 20 seconds, showing out (its log) otherwise.
func WaitReturn(t testing.TB, cancel context.CancelFunc, done <-chan error, out fmt.Stringer) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v; output:\n%s", err, out)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Run did not return; output:\n%s", out)
	}
}
