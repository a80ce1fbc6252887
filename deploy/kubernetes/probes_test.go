package kubernetes_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/tierq/tierq/examples/thumbnail/app"
	"github.com/tierq/tierq/internal/proctest"
	"github.com/tierq/tierq/internal/refapp"
	"github.com/tierq/tierq/internal/testdb"
)

// runs are the run functions of the binaries the manifests run, as their
// mains call them. The thumbnail example joins the reference app's
// deployment, so its scheduler and API are the -with-reference ones.
var runs = map[string]func(ctx context.Context, environ []string, stdout io.Writer) error{
	"worker":                             refapp.RunWorker,
	"scheduler":                          refapp.RunScheduler,
	"api":                                refapp.RunAPI,
	"thumbnail-worker":                   app.RunWorker,
	"thumbnail-scheduler-with-reference": app.RunSchedulerWithReference,
	"thumbnail-api-with-reference":       app.RunAPIWithReference,
}

// listening is the address a process logs once it listens (JSON logs:
// LOG_FORMAT=json in tierq-config).
var listening = regexp.MustCompile(`"msg":"(?:metrics|api) listening".*?"addr":"([^"]+)"`)

// TestProbesAreServed runs the real processes of every Deployment of prod,
// prod-split and the example, one after the other in this test binary,
// each with its container's environment from the build, two variables
// changed: the
// database (this test's) and the listen address (a free loopback port
// instead of the pod's 0.0.0.0, whose port TestProbesAndPorts checks).
// Each one's readiness probe's path answers 200 once it is up, and its
// liveness probe's path 200 too.
func TestProbesAreServed(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	type target struct {
		name  string
		c     corev1.Container
		env   map[string]string
		proc  process
		owner string
	}
	var targets []target
	for _, name := range []string{"prod", "prod-split", "prod with the thumbnail example"} {
		b := buildVariant(t, variantNamed(t, name))
		for _, p := range pods(b) {
			for _, c := range p.spec.Containers {
				if !isTierq(c) || c.LivenessProbe == nil {
					continue
				}
				env := containerEnv(t, b, c)
				proc, err := loadProcess(t, c, env)
				require.NoError(t, err)
				key := b.variant.name + " " + p.owner
				if slices.ContainsFunc(targets, func(o target) bool { return o.owner == p.owner && o.proc.binary == proc.binary }) {
					continue // the same Deployment in another variant
				}
				targets = append(targets, target{name: key, c: c, env: env, proc: proc, owner: p.owner})
			}
		}
	}
	require.Len(t, targets, 10, "4 of prod, the split's 3, the example's 3")

	// One at a time: each holds its pool's connections while it runs, and
	// the test server is shared.
	for _, tg := range targets {
		env := tg.env
		env["DATABASE_URL"], env["DATABASE_SCHEMA"] = db.URL, db.Schema
		for _, k := range []string{"METRICS_ADDR", "API_ADDR"} {
			if env[k] != "" {
				env[k] = "127.0.0.1:0"
			}
		}
		run, ok := runs[tg.proc.binary]
		require.True(t, ok, "%s: no run function for %s", tg.name, tg.proc.binary)
		ctx, cancel := context.WithCancel(context.Background())
		out := &proctest.Buffer{}
		done := make(chan error, 1)
		go func() { done <- run(ctx, environ(env), out) }()

		var addr string
		testdb.WaitFor(t, 30*time.Second, tg.name+" to listen", func() bool {
			m := listening.FindStringSubmatch(out.String())
			if m != nil {
				addr = m[1]
			}
			return m != nil
		})
		base := "http://" + addr
		ready := tg.c.ReadinessProbe.HTTPGet.Path
		testdb.WaitFor(t, 30*time.Second, tg.name+" "+ready+" to answer 200", func() bool {
			return status(t, base+ready) == http.StatusOK
		})
		require.Equal(t, http.StatusOK, status(t, base+tg.c.LivenessProbe.HTTPGet.Path), tg.name)
		require.Equal(t, http.StatusNotFound, status(t, base+"/no-such-probe"), "%s: a path it does not serve is a 404", tg.name)
		if strings.HasSuffix(tg.proc.binary, "worker") || strings.HasSuffix(tg.proc.binary, "scheduler") {
			require.Equal(t, http.StatusOK, status(t, base+"/metrics"), tg.name)
		}
		proctest.WaitReturn(t, cancel, done, out)
	}
}

// status is the status code of a GET of url.
func status(t *testing.T, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
