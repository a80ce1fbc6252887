//go:build chaos

package chaos_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// suite is what every scenario shares: one working folder, the binaries and
// one PostgreSQL cluster (each scenario works in a database of its own).
var suite struct {
	base    string // working folder, reachable by the unprivileged user
	bin     string // the built binaries
	cred    *syscall.Credential
	cluster *cluster
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	var err error
	if suite.cred, err = unprivileged(); err != nil {
		return fail(err)
	}
	if suite.base, err = os.MkdirTemp("", "tierq-chaos-"); err != nil {
		return fail(err)
	}
	if err := os.Chmod(suite.base, 0o755); err != nil {
		return fail(err)
	}
	keep := os.Getenv("TIERQ_CHAOS_KEEP") != ""
	defer func() {
		if !keep {
			_ = os.RemoveAll(suite.base)
		}
	}()

	// The real binaries, built once (without -race: the suite measures
	// recovery, and two cores are busy enough).
	suite.bin = filepath.Join(suite.base, "bin")
	build := exec.Command("go", "build", "-o", suite.bin+string(filepath.Separator),
		"./cmd/worker", "./cmd/scheduler", "./cmd/api", "./cmd/tierctl",
		// The production-traffic scenario runs the thumbnail example beside
		// the reference app, under the example's scheduler and API.
		"./examples/thumbnail/cmd/thumbnail-worker", "./examples/thumbnail/cmd/thumbnail-scheduler-with-reference", "./examples/thumbnail/cmd/thumbnail-api-with-reference")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("go build: %v\n%s", err, out))
	}

	if suite.cluster, err = newCluster(filepath.Join(suite.base, "pg"), suite.cred); err != nil {
		return fail(err)
	}
	defer func() {
		if suite.cluster.running() {
			_ = suite.cluster.stop()
		}
	}()

	code := m.Run()
	if code != 0 {
		keep = true
	}
	if keep {
		fmt.Println("chaos: logs and the cluster's data kept in", suite.base)
	}
	return code
}
