//go:build chaos

package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgUser is the unprivileged user that runs PostgreSQL (initdb refuses root)
// and, when the suite runs as root, every tierq process too: that is how they
// run in production, and a directory without read permission is then really
// unreadable to the worker (scenario poison input).
const pgUser = "tierq-pg"

// unprivileged returns the credential of pgUser, creating the user if needed,
// or nil when the suite does not run as root.
func unprivileged() (*syscall.Credential, error) {
	if os.Getuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(pgUser)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", pgUser).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("useradd %s: %v: %s", pgUser, err, out)
		}
		if u, err = user.Lookup(pgUser); err != nil {
			return nil, err
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// chown gives path to cred's user (nothing when cred is nil).
func chown(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

// cluster is a throwaway PostgreSQL cluster on a free loopback port, which
// the scenarios may stop and start. The server runs as a child of the test
// process that dies with it (Pdeathsig), so a crashed or timed-out run leaves
// no server behind.
type cluster struct {
	bindir, dir, data string
	port              int
	cred              *syscall.Credential
	server            *exec.Cmd
	exited            chan struct{}
}

// serverBindir finds PostgreSQL's server binaries: TIERQ_PG_BINDIR (set by
// scripts/pg.sh bindir, which installs them if missing), else the newest
// /usr/lib/postgresql/*/bin.
func serverBindir() (string, error) {
	if dir := os.Getenv("TIERQ_PG_BINDIR"); dir != "" {
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb): run `eval \"$(scripts/pg.sh bindir)\"`, which installs them, or set TIERQ_PG_BINDIR")
}

// newCluster creates and starts a cluster under dir.
func newCluster(dir string, cred *syscall.Credential) (*cluster, error) {
	bindir, err := serverBindir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := chown(dir, cred); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &cluster{bindir: bindir, dir: dir, data: filepath.Join(dir, "data"), port: port, cred: cred}
	if err := c.run("initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"); err != nil {
		return nil, err
	}
	return c, c.start()
}

// run runs one of the server's programs (initdb) as the cluster's user.
func (c *cluster) run(program string, args ...string) error {
	cmd := exec.Command(filepath.Join(c.bindir, program), args...) //nolint:gosec // the suite's own cluster
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %w\n%s", program, args, err, out)
	}
	return nil
}

// start starts the server and waits until it accepts connections. Like
// scripts/pg.sh's throwaway cluster it does not fsync (a fast shutdown
// still writes everything; only an OS crash could lose data), and commits
// are synchronous.
func (c *cluster) start() error {
	logFile, err := os.OpenFile(filepath.Join(c.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(c.bindir, "postgres"), "-D", c.data, "-p", strconv.Itoa(c.port), //nolint:gosec // the suite's own cluster
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=300",
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_wal_size=8GB")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.server, c.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(c.exited)

	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(context.Background(), c.url("postgres"))
		if err == nil {
			return conn.Close(context.Background())
		}
		select {
		case <-c.exited:
			log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
			return fmt.Errorf("postgres exited at start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres does not accept connections after 60s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop shuts the server down in fast mode (SIGINT): clients are
// disconnected, open transactions roll back, everything committed is kept.
func (c *cluster) stop() error {
	if !c.running() {
		return nil
	}
	if err := c.server.Process.Signal(syscall.SIGINT); err != nil {
		return err
	}
	select {
	case <-c.exited:
		return nil
	case <-time.After(60 * time.Second):
		_ = c.server.Process.Kill()
		return errors.New("postgres did not stop within 60s of a fast shutdown")
	}
}

// running reports whether the server is up.
func (c *cluster) running() bool {
	if c.server == nil {
		return false
	}
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// url is the connection URL of database name.
func (c *cluster) url(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, name)
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
