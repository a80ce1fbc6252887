package runscript

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/testdb"
)

// catchHangUp makes the scripts start with SIGHUP's default action when
// the tests run with it ignored (under nohup, say): an ignored signal stays
// ignored across exec, bash cannot trap one it was started with ignored,
// and the terminal-closed case then never stopped (run.sh and its tierctl
// ran the demo to its end). A signal this process catches is reset to its
// default in the programs it starts.
func catchHangUp() {
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
}

// script is one run of scripts/run.sh in a process group of its own, like
// a foreground job in a terminal: a signal sent to the group is what the
// terminal sends on Ctrl-C or when it is closed.
type script struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  *proctest.Buffer
	pool *pgxpool.Pool // the run's own database
	addr string        // the API's address
	logs string        // TIERQ_LOG_DIR
	done chan error    // cmd.Wait's result
}

// bundle is what a test's runs share: the checkout and the binaries,
// built once per test into a directory of its own (TIERQ_BIN_DIR), so that
// runs never race other tests over .tierq/bin.
type bundle struct {
	root string
	bin  string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	catchHangUp()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	return &bundle{root: root, bin: t.TempDir()}
}

// newDatabase creates a database of the run's own on the test server
// (scripts/pg.sh's, TEST_DATABASE_URL), dropped when the test ends, and
// returns its URL and a pool on it.
func newDatabase(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(testdb.URL())
	require.NoError(t, err)
	admin, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err, "test database %s", testdb.URL())
	t.Cleanup(func() { _ = admin.Close(context.Background()) })

	name := fmt.Sprintf("tierq_runscript_%d_%d", os.Getpid(), time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})

	u := cfg.ConnString()
	u = strings.Replace(u, "/"+cfg.Database, "/"+name, 1)
	if !strings.Contains(u, "/"+name) {
		t.Fatalf("cannot point %s at database %s", testdb.URL(), name)
	}
	poolCfg, err := pgxpool.ParseConfig(u)
	require.NoError(t, err)
	poolCfg.MaxConns = 2
	return u, testdb.PoolFor(t, poolCfg)
}

// freeAddr is a loopback address whose port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// start runs scripts/run.sh with its own database and API port, the
// binaries in b.bin and env on top (DEMO, DEMO_FLAGS, …).
func (b *bundle) start(t *testing.T, env ...string) *script {
	t.Helper()
	url, pool := newDatabase(t)
	s := &script{t: t, pool: pool, addr: freeAddr(t), logs: t.TempDir(), out: &proctest.Buffer{}, done: make(chan error, 1)}

	s.cmd = exec.Command("bash", "scripts/run.sh") //nolint:gosec // the checkout's own script
	s.cmd.Dir = b.root
	s.cmd.Env = append(environ(),
		"DATABASE_URL="+url,
		"API_ADDR="+s.addr,
		"TIERQ_BIN_DIR="+b.bin,
		"TIERQ_LOG_DIR="+s.logs,
		// Five connections a process: make run starts five of them beside
		// other tests on a shared server.
		"DATABASE_MAX_CONNS=5",
		"DLQ_DRAIN_INTERVAL=1s",
	)
	s.cmd.Env = append(s.cmd.Env, env...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.cmd.WaitDelay = 5 * time.Second
	require.NoError(t, s.cmd.Start())
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(s.kill)
	return s
}

// environ is this process's environment without what the script or the
// processes it starts read from it, which start sets.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "DATABASE_"), strings.HasPrefix(name, "API_"),
			strings.HasPrefix(name, "DEMO"), strings.HasPrefix(name, "TIERQ_"),
			name == "TEST_DATABASE_URL", name == "SOFT_STOP_TIMEOUT", name == "ANALYSIS_ROOTS":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// kill ends whatever of the run is left after a failed test: the script's
// group and each process it started.
func (s *script) kill() {
	// Whether it has exited is the Wait goroutine's to say (reading
	// cmd.ProcessState here raced with Wait's write of it).
	select {
	case err := <-s.done:
		s.done <- err
		return
	default:
	}
	for _, pid := range s.startedPIDs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// signal sends sig to the script's process group, as a terminal does.
func (s *script) signal(sig syscall.Signal) {
	s.t.Helper()
	require.NoError(s.t, syscall.Kill(-s.cmd.Process.Pid, sig))
}

// waitOutput waits until the script has printed want.
func (s *script) waitOutput(want string, timeout time.Duration) {
	s.t.Helper()
	proctest.WaitOutput(s.t, s.out, want, timeout)
}

// wait waits for the script to exit and requires status 0.
func (s *script) wait(timeout time.Duration) {
	s.t.Helper()
	select {
	case err := <-s.done:
		s.done <- err
		require.NoError(s.t, err, "run.sh's output:\n%s", s.out)
	case <-time.After(timeout):
		s.t.Fatalf("run.sh did not exit within %s; output:\n%s", timeout, s.out)
	}
}

var startedPID = regexp.MustCompile(`started (?:on \S+ )?\(pid (\d+)`)

// startedPIDs are the pids of the workers, the scheduler and the API, as
// the script printed them.
func (s *script) startedPIDs() []int {
	var pids []int
	for _, m := range startedPID.FindAllStringSubmatch(s.out.String(), -1) {
		pid, _ := strconv.Atoi(m[1])
		pids = append(pids, pid)
	}
	return pids
}

// startedPIDOf is the pid the script printed for the process it started
// as name ("worker analyzer", "scheduler", "api"), failing the test if it
// printed none.
func (s *script) startedPIDOf(name string) int {
	s.t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` started (?:on \S+ )?\(pid (\d+)`).FindStringSubmatch(s.out.String())
	require.NotNil(s.t, m, "no %q started line; output:\n%s", name, s.out)
	pid, err := strconv.Atoi(m[1])
	require.NoError(s.t, err)
	return pid
}

// proc is a process as /proc shows it: its pid and start time tell it
// apart from a later process given the same pid.
type proc struct {
	pid, ppid int
	start     string
	state     string
	comm      string
}

func readProc(pid int) (proc, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, false
	}
	// pid (comm) state ppid … starttime is field 22; comm may hold spaces.
	text := string(raw)
	open, closing := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
	if open < 0 || closing < open {
		return proc{}, false
	}
	fields := strings.Fields(text[closing+1:])
	if len(fields) < 20 {
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(fields[1])
	return proc{pid: pid, ppid: ppid, start: fields[19], state: fields[0], comm: text[open+1 : closing]}, true
}

// descendants are the processes under the script now: the ones it started
// and the foreground tierctl.
func (s *script) descendants() []proc {
	s.t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(s.t, err)
	children := map[int][]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []proc
	var walk func(pid int)
	walk = func(pid int) {
		for _, c := range children[pid] {
			out = append(out, c)
			walk(c.pid)
		}
	}
	walk(s.cmd.Process.Pid)
	return out
}

// requireGone requires that none of procs is still running.
func (s *script) requireGone(procs []proc) {
	s.t.Helper()
	for _, p := range procs {
		now, ok := readProc(p.pid)
		if ok && now.start == p.start && now.state != "Z" {
			s.t.Errorf("%s (pid %d) outlived run.sh (state %s)", p.comm, p.pid, now.state)
		}
	}
}

// requirePortFree requires that the next make run could listen on the
// API's address.
func (s *script) requirePortFree() {
	s.t.Helper()
	l, err := net.Listen("tcp", s.addr)
	require.NoError(s.t, err, "the API's address after run.sh exited")
	require.NoError(s.t, l.Close())
}

// count runs a count query on the run's database.
func (s *script) count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.pool.QueryRow(s.t.Context(), sql, args...).Scan(&n))
	return n
}

// counted reports whether a count query on the run's database answers at
// least n (false while the script has not migrated it yet).
func (s *script) counted(n int, sql string, args ...any) bool {
	var got int
	err := s.pool.QueryRow(s.t.Context(), sql, args...).Scan(&got)
	return err == nil && got >= n
}

// waitFor waits until cond holds, checking every 50ms.
func (s *script) waitFor(timeout time.Duration, what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case err := <-s.done:
			s.done <- err
			s.t.Fatalf("run.sh exited (%v) while waiting for %s; output:\n%s", err, what, s.out)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no %s after %s; output:\n%s", what, timeout, s.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lines are the output's lines that start with prefix.
func (s *script) lines(prefix string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s.out.String()))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, sc.Text())
		}
	}
	return out
}
