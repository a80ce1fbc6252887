package kubernetes_test

import (
	"log/slog"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/examples/thumbnail/app"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/scheduler"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/worker"
)

// pod is one pod template of a build: a Deployment's or the Job's.
type pod struct {
	owner string // "Deployment/worker-analyzer"
	name  string // the Deployment's or Job's name
	spec  corev1.PodSpec
	meta  map[string]string // annotations of the template
}

// pods returns every pod template of b.
func pods(b *build) []pod {
	var out []pod
	for _, o := range b.objects {
		switch d := o.typed.(type) {
		case *appsDeployment:
			out = append(out, pod{owner: "Deployment/" + d.Name, name: d.Name, spec: d.Spec.Template.Spec, meta: d.Spec.Template.Annotations})
		case *batchJob:
			out = append(out, pod{owner: "Job/" + d.Name, name: d.Name, spec: d.Spec.Template.Spec, meta: d.Spec.Template.Annotations})
		}
	}
	return out
}

// containerEnv is the environment Kubernetes gives container c: its envFrom
// sources in order (a later source's key wins), then its env (which wins
// over all of them), ConfigMap and Secret keys read from b.
func containerEnv(t *testing.T, b *build, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			maps.Copy(env, prefixed(from.Prefix, configMapData(t, b, from.ConfigMapRef.Name)))
		case from.SecretRef != nil:
			maps.Copy(env, prefixed(from.Prefix, secretData(t, b, from.SecretRef.Name)))
		default:
			t.Fatalf("%s: container %s: an envFrom source the tests do not know", b.variant.name, c.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			// Kubernetes expands $(VAR) in values; none of tierq's uses it.
			require.NotContains(t, e.Value, "$(", "%s: %s", c.Name, e.Name)
			env[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			data := configMapData(t, b, e.ValueFrom.ConfigMapKeyRef.Name)
			v, ok := data[e.ValueFrom.ConfigMapKeyRef.Key]
			require.True(t, ok, "%s: %s: ConfigMap %s has no key %s", b.variant.name, c.Name, e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key)
			env[e.Name] = v
		case e.ValueFrom.SecretKeyRef != nil:
			data := secretData(t, b, e.ValueFrom.SecretKeyRef.Name)
			v, ok := data[e.ValueFrom.SecretKeyRef.Key]
			require.True(t, ok, "%s: %s: Secret %s has no key %s", b.variant.name, c.Name, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
			env[e.Name] = v
		default:
			t.Fatalf("%s: container %s: %s comes from a source the tests do not know", b.variant.name, c.Name, e.Name)
		}
	}
	return env
}

func prefixed(prefix string, data map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range data {
		out[prefix+k] = v
	}
	return out
}

// configMapData is the data of the build's ConfigMap called name (its
// final, hashed name, as references carry it).
func configMapData(t *testing.T, b *build, name string) map[string]string {
	t.Helper()
	return one[*corev1.ConfigMap](t, b, name).Data
}

// secretData is the data of the build's Secret called name, decoded.
func secretData(t *testing.T, b *build, name string) map[string]string {
	t.Helper()
	s := one[*corev1.Secret](t, b, name)
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	maps.Copy(out, s.StringData)
	return out
}

// environ turns env into KEY=VALUE strings, as os.Environ gives them.
func environ(env map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// process is what a container's process makes of its environment: the
// configuration its main loads, before it connects to anything.
type process struct {
	// binary is the command's base name ("worker", "tierctl migrate").
	binary string
	// listen is where it serves HTTP (API_ADDR, or METRICS_ADDR: /metrics,
	// /healthz and /readyz); empty for none.
	listen string
	// softStop is SOFT_STOP_TIMEOUT (workers and the scheduler).
	softStop time.Duration
	// worker is a worker's configuration (nil for other processes).
	worker *config.Worker
	// queues are a worker's queues, by name, as the worker derives them
	// from its translated configuration (worker.Deployment.Queues).
	queues map[string]worker.Queue
	// reads are the directories the process reads (ANALYSIS_ROOTS of an
	// analyzer, a thumbnailer's source), writes those it writes.
	reads, writes []string
}

// tierqBinaries are the commands the manifests run: those of the image the
// project's Dockerfile builds, and those of the thumbnail example's image
// (a team's own, built from examples/thumbnail/cmd) that the example runs.
// The example joins the reference app's deployment, so its scheduler and
// API are the -with-reference mains (app.RunSchedulerWithReference,
// app.RunAPIWithReference); the example's own thumbnail-scheduler and
// thumbnail-api, which serve the thumbnail service alone, run in no
// manifest.
var tierqBinaries = []string{
	"worker", "scheduler", "api", "tierctl",
	"thumbnail-worker", "thumbnail-scheduler-with-reference", "thumbnail-api-with-reference",
}

// isTierq says whether c runs one of tierq's processes (not the dev
// overlay's PostgreSQL).
func isTierq(c corev1.Container) bool {
	return len(c.Command) > 0 && slices.Contains(tierqBinaries, path.Base(c.Command[0]))
}

// loadProcess loads env as c's process does before it connects: the same
// loaders, in the same combination, as its main (internal/refapp, the
// thumbnail example's app package, tierctl migrate). It returns the
// configuration error, if any, which matches config.ErrInvalid.
func loadProcess(t *testing.T, c corev1.Container, env map[string]string) (process, error) {
	t.Helper()
	require.True(t, isTierq(c), c.Name)
	environ := environ(env)
	p := process{binary: path.Base(c.Command[0])}
	switch p.binary {
	case "worker", "thumbnail-worker":
		var registry *service.Registry
		var sectionErr error
		if p.binary == "worker" {
			r, err := jobs.Registry(jobs.Deps{})
			require.NoError(t, err)
			registry = r
			analysis, err := config.LoadSection[jobsconfig.AnalysisConfig](environ)
			sectionErr = err
			if err == nil && env["WORKER_SERVICE"] == jobs.ServiceAnalyzer {
				p.reads = analysis.Roots
			}
		} else {
			dirs, err := config.LoadSection[app.Dirs](environ)
			sectionErr = err
			r, rerr := thumbnail.Registry(thumbnail.Deps{SourceDir: dirs.SourceDir, OutputDir: dirs.OutputDir})
			require.NoError(t, rerr)
			registry = r
			p.reads, p.writes = []string{dirs.SourceDir}, []string{dirs.OutputDir}
		}
		cfg, err := config.LoadWorker(environ, registry)
		if err := config.Join(err, sectionErr); err != nil {
			return p, err
		}
		p.worker, p.listen, p.softStop = &cfg, cfg.MetricsAddr, cfg.SoftStopTimeout
		p.queues = workerDeploymentQueues(t, cfg, registry)
	case "scheduler", "thumbnail-scheduler-with-reference":
		// Both run the reference app's maintenance (REANALYZE_*,
		// RETENTION_*). Both check RESCUE_STUCK_JOBS_AFTER against every
		// kind's timeout before they connect (scheduler.Run validates its
		// Config first): checked here for both.
		cfg, err := config.Load[config.Scheduler](environ)
		_, maintenanceErr := jobsconfig.LoadMaintenance(environ, &cfg)
		var limitsErr error
		if p.binary == "scheduler" {
			// The reference app's scheduler records the tenant limits by
			// tier (refapp.RunScheduler: config.LoadLimits).
			registry, rerr := jobs.Registry(jobs.Deps{})
			require.NoError(t, rerr)
			_, limitsErr = config.LoadLimits(environ, registry)
		}
		if err := config.Join(err, maintenanceErr, limitsErr); err != nil {
			return p, err
		}
		if err := cfg.CheckKindTimeouts(schedulerTimeouts(t, p.binary)); err != nil {
			return p, err
		}
		p.listen, p.softStop = cfg.MetricsAddr, cfg.SoftStopTimeout
	case "api", "thumbnail-api-with-reference":
		// Both bound the analyzer's targets (ANALYSIS_ROOTS).
		cfg, err := config.Load[config.API](environ)
		_, analysisErr := config.LoadSection[jobsconfig.AnalysisConfig](environ)
		if err := config.Join(err, analysisErr); err != nil {
			return p, err
		}
		p.listen = cfg.Addr
	case "tierctl":
		require.Equal(t, []string{"/usr/local/bin/tierctl", "migrate"}, append(c.Command, c.Args...), "tierctl runs only as the migrate Job")
		p.binary = "tierctl migrate"
		if _, err := config.Load[config.CLI](environ); err != nil {
			return p, err
		}
	}
	return p, nil
}

// workerDeploymentQueues are the queues of the worker deployment cfg
// configures, by name: worker.New's, from cfg translated for registry
// (config.Worker.Config), as the worker computes them.
func workerDeploymentQueues(t *testing.T, cfg config.Worker, registry *service.Registry) map[string]worker.Queue {
	t.Helper()
	workerConfig, err := cfg.Config(registry, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	d, err := worker.New(workerConfig)
	require.NoError(t, err)
	queues := map[string]worker.Queue{}
	for _, q := range d.Queues() {
		queues[q.Name] = q
	}
	return queues
}

// schedulerRegistries are the registries of the manifests' schedulers, by
// binary, as their run functions build them: the reference app's services
// (refapp.RunScheduler) and, joined with them, the thumbnail service
// (app.RunSchedulerWithReference).
var schedulerRegistries = map[string]func(jobs.Deps) (*service.Registry, error){
	"scheduler":                          jobs.Registry,
	"thumbnail-scheduler-with-reference": thumbnail.WithReference,
}

// schedulerTimeouts are the timeouts of every kind the scheduler binary
// registers, from the kinds themselves (scheduler.Timeouts): the
// scheduler's own sweeps, its registry's services with the reference app's
// maintenance, and the load-test kind both add (scheduler.Config.ExtraKinds).
func schedulerTimeouts(t *testing.T, binary string) map[string]time.Duration {
	t.Helper()
	registry, ok := schedulerRegistries[binary]
	require.True(t, ok, "%s is not a scheduler of the manifests", binary)
	cfg, err := config.Load[config.Scheduler]([]string{"DATABASE_URL=postgres://127.0.0.1:1/none"})
	require.NoError(t, err)
	maintenance, err := jobsconfig.LoadMaintenance(nil, &cfg)
	require.NoError(t, err)
	services, err := registry(jobs.Deps{Maintenance: maintenance})
	require.NoError(t, err)
	return scheduler.Timeouts(services, jobs.LoadTestKind(nil))
}

// listenPort is the port of a host:port listen address.
func listenPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, addr)
	n, err := strconv.ParseInt(port, 10, 32)
	require.NoError(t, err, addr)
	return int32(n)
}

// containers calls f with every tierq container of every pod of every
// variant, its environment and its process's configuration (which must
// load).
func eachTierqContainer(t *testing.T, f func(t *testing.T, b *build, p pod, c corev1.Container, proc process)) {
	t.Helper()
	for _, b := range builds(t) {
		for _, p := range pods(b) {
			for _, c := range p.spec.Containers {
				if !isTierq(c) {
					continue
				}
				proc, err := loadProcess(t, c, containerEnv(t, b, c))
				require.NoError(t, err, "%s: %s container %s: its environment does not load", b.variant.name, p.owner, c.Name)
				f(t, b, p, c, proc)
			}
		}
	}
}

// TestContainerEnvironmentsLoad gives every tierq container's environment,
// as Kubernetes builds it from tierq-config, tierq-secrets and the
// container's own env, to the configuration loaders its main runs: each
// must load, as it does before the process touches the database.
func TestContainerEnvironmentsLoad(t *testing.T) {
	t.Parallel()

	seen := map[string]bool{}
	eachTierqContainer(t, func(t *testing.T, b *build, p pod, c corev1.Container, proc process) {
		seen[proc.binary] = true
		if proc.worker != nil {
			// The Deployment's own env is what makes it a worker of one
			// service: tierq-config alone names none (exit status 2).
			alone := maps.Clone(containerEnv(t, b, c))
			for _, e := range c.Env {
				if e.Name == "WORKER_SERVICE" {
					alone["WORKER_SERVICE"] = configMapData(t, b, c.EnvFrom[0].ConfigMapRef.Name)["WORKER_SERVICE"]
				}
			}
			_, err := loadProcess(t, c, alone)
			require.ErrorIs(t, err, config.ErrInvalid, "%s: %s without its WORKER_SERVICE", b.variant.name, p.owner)
		}
	})
	require.Equal(t, map[string]bool{
		"worker": true, "scheduler": true, "api": true, "tierctl migrate": true,
		"thumbnail-worker": true, "thumbnail-scheduler-with-reference": true, "thumbnail-api-with-reference": true,
	}, seen)
}

// TestRescueStuckJobsAfter: in the cluster a job whose worker died (an OOM
// kill, a lost node) is retried after 5 minutes, not the default hour;
// that stays above every job kind's timeout (the longest is 1m) and
// JOB_TIMEOUT, which the scheduler checks at start (loadProcess runs the
// check, so every build's scheduler passes it).
func TestRescueStuckJobsAfter(t *testing.T) {
	t.Parallel()

	for binary := range schedulerRegistries {
		timeouts := schedulerTimeouts(t, binary)
		require.Equal(t, time.Minute, slices.Max(slices.Collect(maps.Values(timeouts))), "%s: the longest job kind's timeout", binary)
	}
	eachTierqContainer(t, func(t *testing.T, b *build, p pod, c corev1.Container, proc process) {
		env := containerEnv(t, b, c)
		require.Equal(t, "5m", env["RESCUE_STUCK_JOBS_AFTER"], "%s: %s", b.variant.name, p.owner)
		require.Equal(t, "1m", env["JOB_TIMEOUT"], "%s: %s", b.variant.name, p.owner)
	})
}
