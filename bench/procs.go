package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// workerProcess is one worker process of the scaleout scenario: the
// command Options.WorkerCommand makes, run with the environment of a worker
// deployment of the service under test and the load-test workload,
// connected to the database directly or through a wireProxy of its own,
// which counts its statements and connections.
type workerProcess struct {
	cmd      *exec.Cmd
	proxy    *wireProxy // nil: connected directly
	out      *logBuffer
	appName  string // its connections' application_name
	clientID string // its River client's ID, from its "worker started" log line
	exited   chan struct{}
	waitErr  error // the process's exit, once exited is closed
}

// processStartTimeout bounds a worker process's start, from exec to its
// "worker started" line; processStopTimeout its stop, from SIGTERM to exit
// (its running load-test jobs last milliseconds), after which it is killed.
const (
	processStartTimeout = 60 * time.Second
	processStopTimeout  = 30 * time.Second
)

// startWorkers starts n worker processes of the service under test (the
// i-th with application_name <schema>_w<i>), each behind a wireProxy of its
// own when proxied, and waits until each has logged "worker started". stop
// stops them (SIGTERM, then SIGKILL after processStopTimeout) and closes
// their proxies; it returns an error when one did not exit cleanly. On
// error nothing is left running.
func (e *env) startWorkers(ctx context.Context, n int, proxied bool) (procs []*workerProcess, stop func() error, err error) {
	if e.opts.WorkerCommand == nil {
		return nil, nil, errors.New("bench: the scaleout scenario needs Options.WorkerCommand")
	}
	stop = func() error {
		var wg sync.WaitGroup
		errs := make([]error, len(procs))
		for i, p := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = p.stop()
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	for i := range n {
		p, err := e.startWorker(fmt.Sprintf("%s_w%d", e.Name, i), proxied)
		if err != nil {
			_ = stop()
			return nil, nil, err
		}
		procs = append(procs, p)
	}
	deadline := time.Now().Add(processStartTimeout)
	for _, p := range procs {
		if err := p.waitStarted(ctx, deadline); err != nil {
			_ = stop()
			return nil, nil, err
		}
	}
	ids := map[string]bool{}
	for _, p := range procs {
		if ids[p.clientID] {
			_ = stop()
			return nil, nil, fmt.Errorf("two worker processes have River client ID %s: jobs cannot be told apart by process", p.clientID)
		}
		ids[p.clientID] = true
	}
	return procs, stop, nil
}

// startWorker starts one worker process, behind a proxy of its own when
// proxied.
func (e *env) startWorker(appName string, proxied bool) (p *workerProcess, err error) {
	p = &workerProcess{out: &logBuffer{}, appName: appName, exited: make(chan struct{})}
	dbURL, err := withAppName(e.opts.DatabaseURL, appName)
	if err != nil {
		return nil, err
	}
	if proxied {
		if p.proxy, err = newWireProxy(e.opts.DatabaseURL); err != nil {
			return nil, err
		}
		if dbURL, err = p.proxy.wireURL(e.opts.DatabaseURL, appName); err != nil {
			p.proxy.close()
			return nil, err
		}
		p.proxy.serve()
	}
	// The bench's own settings last, as workerConfig orders them.
	environ := append(slices.Clone(e.opts.WorkerEnv),
		"DATABASE_URL="+dbURL, "DATABASE_SCHEMA="+e.Name,
		"WORKER_SERVICE="+e.opts.Service.Name(), "LOAD_TEST_WORKLOAD=true",
		"LOG_FORMAT=json", "LOG_LEVEL=info", "METRICS_ADDR=",
	)
	p.cmd = e.opts.WorkerCommand(environ)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if p.cmd.SysProcAttr == nil {
		p.cmd.SysProcAttr = stopWithParent()
	}
	if err := p.cmd.Start(); err != nil {
		if p.proxy != nil {
			p.proxy.close()
		}
		return nil, fmt.Errorf("start worker process: %w", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// withAppName is databaseURL (a URL or keyword/value string) with
// application_name set to name.
func withAppName(databaseURL, name string) (string, error) {
	if !strings.Contains(databaseURL, "://") {
		return databaseURL + " application_name=" + name, nil
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// waitStarted waits for the process's "worker started" line and reads its
// River client ID from it.
func (p *workerProcess) waitStarted(ctx context.Context, deadline time.Time) error {
	return waitStart(ctx, "worker process "+p.appName, p.exited, func() error { return p.waitErr }, p.out, deadline, func() bool {
		if id := p.out.startedClientID(); id != "" {
			p.clientID = id
			return true
		}
		return false
	})
}

// waitStart polls started every 20ms until it reports true, and fails when
// the process named name exits first (its exit from waitErr, once exited
// is closed), ctx ends or deadline passes, showing out.
func waitStart(ctx context.Context, name string, exited <-chan struct{}, waitErr func() error, out *logBuffer, deadline time.Time, started func() bool) error {
	for {
		if started() {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before it started (%v):\n%s", name, waitErr(), out)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not started after %s:\n%s", name, processStartTimeout, out)
		}
	}
}

// stop sends SIGTERM and waits for the process to exit (killing it after
// processStopTimeout), then closes its proxy. An exit other than status 0
// after the SIGTERM is an error.
func (p *workerProcess) stop() error {
	if p.proxy != nil {
		defer p.proxy.close()
	}
	select {
	case <-p.exited:
		return fmt.Errorf("worker process %s exited before it was stopped (%v):\n%s", p.appName, p.waitErr, p.out)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(processStopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("worker process %s did not stop within %s of SIGTERM; killed:\n%s", p.appName, processStopTimeout, p.out)
	}
	if p.waitErr != nil {
		return fmt.Errorf("worker process %s: %w:\n%s", p.appName, p.waitErr, p.out)
	}
	return nil
}

// logBuffer is a worker process's output, kept for errors and for its
// "worker started" line: the first 64 KiB and the last 64 KiB.
type logBuffer struct {
	mu         sync.Mutex
	head, tail []byte
	dropped    int
}

const logBufferHalf = 64 << 10

func (b *logBuffer) Write(p []byte) (int, error) {
	n := len(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := logBufferHalf - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - logBufferHalf; over > 0 {
		b.dropped += over
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
	return n, nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped > 0 {
		return fmt.Sprintf("%s\n[… %d bytes …]\n%s", b.head, b.dropped, b.tail)
	}
	return string(b.head) + string(b.tail)
}

// startedClientID is the client_id of the process's "worker started" line
// (JSON logs, as startWorker asks), "" until it has logged it.
func (b *logBuffer) startedClientID() string {
	b.mu.Lock()
	head := slices.Clone(b.head)
	b.mu.Unlock()
	s := bufio.NewScanner(bytes.NewReader(head))
	s.Buffer(nil, logBufferHalf)
	for s.Scan() {
		line := s.Bytes()
		if !bytes.Contains(line, []byte(`"worker started"`)) {
			continue
		}
		var entry struct {
			Msg      string `json:"msg"`
			ClientID string `json:"client_id"`
		}
		if json.Unmarshal(line, &entry) == nil && entry.Msg == "worker started" {
			return strings.TrimSpace(entry.ClientID)
		}
	}
	return ""
}
