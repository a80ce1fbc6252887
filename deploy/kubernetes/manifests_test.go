package kubernetes_test

import (
	"bufio"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/config"
	tierqprocess "github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/routing"
)

// envExampleVars are the variables .env.example sets (its NAME= lines).
func envExampleVars(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../../.env.example")
	require.NoError(t, err)
	defer f.Close()
	var vars []string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := scanner.Text()
		if name, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			vars = append(vars, name)
		}
	}
	require.NoError(t, scanner.Err())
	require.Contains(t, vars, "DATABASE_URL")
	return vars
}

// secretVars are the variables whose configuration field is marked secret
// (`secret:"..."`: redacted in errors) in any process's configuration.
func secretVars() []string {
	var vars []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for sf := range t.Fields() {
			if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
				walk(sf.Type)
				continue
			}
			key, _, _ := strings.Cut(sf.Tag.Get("env"), ",")
			if key != "" && sf.Tag.Get("secret") != "" && !slices.Contains(vars, key) {
				vars = append(vars, key)
			}
		}
	}
	for _, t := range []reflect.Type{
		reflect.TypeFor[config.Worker](), reflect.TypeFor[config.Scheduler](), reflect.TypeFor[config.API](), reflect.TypeFor[config.CLI](),
		reflect.TypeFor[jobsconfig.AnalysisConfig](), reflect.TypeFor[jobsconfig.MaintenanceConfig](),
	} {
		walk(t)
	}
	slices.Sort(vars)
	return vars
}

// TestConfigurationKeysAreEnvExample: tierq-config and tierq-secrets hold
// exactly the variables of .env.example between them, none in both; the
// Secret holds those the configuration marks secret. In prod the Secret is
// the operator's file, none of the base's placeholders.
func TestConfigurationKeysAreEnvExample(t *testing.T) {
	t.Parallel()

	want := envExampleVars(t)
	slices.Sort(want)
	require.Equal(t, []string{"API_ADMIN_TOKEN", "API_TOKEN", "DATABASE_URL", "DLQ_ALERT_WEBHOOK_URL"}, secretVars())
	for _, b := range builds(t) {
		var configMaps []*corev1.ConfigMap
		for _, cm := range all[*corev1.ConfigMap](b) {
			if strings.HasPrefix(cm.Name, "tierq-config-") {
				configMaps = append(configMaps, cm)
			}
		}
		var secrets []*corev1.Secret
		for _, s := range all[*corev1.Secret](b) {
			if strings.HasPrefix(s.Name, "tierq-secrets-") {
				secrets = append(secrets, s)
			}
		}
		require.Len(t, configMaps, 1, b.variant.name)
		require.Len(t, secrets, 1, b.variant.name)
		var got []string
		for k := range configMaps[0].Data {
			require.NotContains(t, secrets[0].Data, k, "%s: %s in both the ConfigMap and the Secret", b.variant.name, k)
			got = append(got, k)
		}
		var inSecret []string
		for k := range secrets[0].Data {
			inSecret = append(inSecret, k)
		}
		slices.Sort(inSecret)
		require.Equal(t, secretVars(), inSecret, b.variant.name)
		got = append(got, inSecret...)
		slices.Sort(got)
		require.Equal(t, want, got, "%s: the ConfigMap's and the Secret's keys against .env.example", b.variant.name)

		if strings.HasPrefix(b.variant.name, "prod") {
			for _, line := range strings.Split(strings.TrimSpace(prodSecrets), "\n") {
				k, v, _ := strings.Cut(line, "=")
				require.Equal(t, v, string(secrets[0].Data[k]), "%s: %s is the operator's", b.variant.name, k)
			}
		}
	}
}

// TestProbesAndPorts: every long-running tierq container is probed where
// its process serves: liveness on /healthz and readiness on /readyz, on the
// port of METRICS_ADDR (workers, the scheduler) or API_ADDR (the API) in
// its own environment, which is the container port the probes name and the
// port its prometheus.io annotations give; each probe waits longer than
// the process takes to answer it.
func TestProbesAndPorts(t *testing.T) {
	t.Parallel()

	probed := 0
	eachTierqContainer(t, func(t *testing.T, b *build, p pod, c corev1.Container, proc process) {
		where := b.variant.name + ": " + p.owner
		if proc.binary == "tierctl migrate" {
			require.Nil(t, c.LivenessProbe, where)
			require.Nil(t, c.ReadinessProbe, where)
			return
		}
		require.NotEmpty(t, proc.listen, "%s: serves no HTTP: no METRICS_ADDR/API_ADDR", where)
		port := listenPort(t, proc.listen)
		for _, probe := range []struct {
			probe *corev1.Probe
			path  string
		}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
			require.NotNil(t, probe.probe, "%s: %s probe", where, probe.path)
			require.NotNil(t, probe.probe.HTTPGet, where)
			require.Equal(t, probe.path, probe.probe.HTTPGet.Path, where)
			require.Equal(t, port, containerPort(t, c, probe.probe.HTTPGet.Port), "%s: %s probe's port", where, probe.path)
			// Longer than what the process takes to answer when the
			// database is slow: a probe that gives up first fails a pod
			// whose process would have answered.
			answersWithin := tierqprocess.ReadyzPingTimeout
			if probe.path == "/readyz" && strings.HasSuffix(proc.binary, "api") {
				answersWithin = apiReadyzTimeout
			}
			require.Greater(t, time.Duration(probe.probe.TimeoutSeconds)*time.Second, answersWithin, "%s: %s probe's timeout", where, probe.path)
		}
		require.Equal(t, "true", p.meta["prometheus.io/scrape"], where)
		require.Equal(t, "/metrics", p.meta["prometheus.io/path"], where)
		require.Equal(t, strconv.Itoa(int(port)), p.meta["prometheus.io/port"], where)
		probed++
	})
	require.Positive(t, probed)
}

// apiReadyzTimeout bounds the API's /readyz (the database ping and the
// migration check: api/health.go's readyz).
const apiReadyzTimeout = 3 * time.Second

// containerPort resolves a probe's or a Service's port (a number, or the
// name of one of c's ports).
func containerPort(t *testing.T, c corev1.Container, port intstr.IntOrString) int32 {
	t.Helper()
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, port.StrVal)
	return 0
}

// graceMargin is the least time a pod's grace period leaves after the
// soft stop: for the jobs River then cancels to return to their queue and
// for the process to exit.
const graceMargin = 5 * time.Second

// TestGracePeriodExceedsSoftStop: Kubernetes kills a pod
// terminationGracePeriodSeconds after SIGTERM; workers and the scheduler
// let running jobs finish for SOFT_STOP_TIMEOUT (from their own
// environment) and need graceMargin more. The API needs its preStop sleep
// and api.ShutdownTimeout for requests in flight.
func TestGracePeriodExceedsSoftStop(t *testing.T) {
	t.Parallel()

	eachTierqContainer(t, func(t *testing.T, b *build, p pod, c corev1.Container, proc process) {
		where := b.variant.name + ": " + p.owner
		if proc.binary == "tierctl migrate" {
			return // nothing to finish: a stopped migration is retried
		}
		require.NotNil(t, p.spec.TerminationGracePeriodSeconds, where)
		grace := time.Duration(*p.spec.TerminationGracePeriodSeconds) * time.Second
		switch proc.binary {
		case "worker", "thumbnail-worker", "scheduler", "thumbnail-scheduler-with-reference":
			require.Equal(t, 25*time.Second, proc.softStop, where)
			require.GreaterOrEqual(t, grace, proc.softStop+graceMargin, "%s: grace period against SOFT_STOP_TIMEOUT %s", where, proc.softStop)
		case "api", "thumbnail-api-with-reference":
			require.NotNil(t, c.Lifecycle, where)
			require.NotNil(t, c.Lifecycle.PreStop.Sleep, where)
			preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			require.GreaterOrEqual(t, grace, preStop+api.ShutdownTimeout+graceMargin, where)
		}
	})
}

// TestPodsAreLockedDown: every pod, tierq's or not, runs as a non-root user
// with the runtime's seccomp profile, no service-account token and no
// Service variables; every container has a read-only root file system, no
// privilege escalation, no capabilities, and CPU and memory requests and
// limits. tierq's run as the Dockerfile's user.
func TestPodsAreLockedDown(t *testing.T) {
	t.Parallel()

	for _, b := range builds(t) {
		for _, p := range pods(b) {
			where := b.variant.name + ": " + p.owner
			s := p.spec
			require.Equal(t, new(false), s.AutomountServiceAccountToken, where)
			require.Equal(t, new(false), s.EnableServiceLinks, where)
			require.NotNil(t, s.SecurityContext, where)
			require.Equal(t, new(true), s.SecurityContext.RunAsNonRoot, where)
			require.NotNil(t, s.SecurityContext.RunAsUser, where)
			require.NotZero(t, *s.SecurityContext.RunAsUser, where)
			require.Equal(t, &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, s.SecurityContext.SeccompProfile, where)
			require.Empty(t, s.InitContainers, where)
			for _, c := range s.Containers {
				where := where + " container " + c.Name
				if isTierq(c) {
					require.Equal(t, int64(65532), *s.SecurityContext.RunAsUser, "%s: distroless's nonroot, the Dockerfile's USER", where)
				}
				sc := c.SecurityContext
				require.NotNil(t, sc, where)
				require.Equal(t, new(false), sc.AllowPrivilegeEscalation, where)
				require.Equal(t, new(true), sc.ReadOnlyRootFilesystem, where)
				require.Nil(t, sc.Privileged, where)
				require.NotNil(t, sc.Capabilities, where)
				require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, where)
				require.Empty(t, sc.Capabilities.Add, where)
				for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					req, ok := c.Resources.Requests[r]
					require.True(t, ok, "%s: %s request", where, r)
					limit, ok := c.Resources.Limits[r]
					require.True(t, ok, "%s: %s limit", where, r)
					require.LessOrEqual(t, req.Cmp(limit), 0, "%s: %s request above its limit", where, r)
				}
			}
		}
	}
}

// overlayTag is the tag an overlay's kustomization.yaml pins the image to
// (its `images` entry for image).
func overlayTag(t *testing.T, overlay string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(overlay, "kustomization.yaml"))
	require.NoError(t, err)
	var k struct {
		Images []struct {
			Name   string `json:"name"`
			NewTag string `json:"newTag"`
		} `json:"images"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &k))
	for _, i := range k.Images {
		if i.Name == image {
			return i.NewTag
		}
	}
	return ""
}

// TestImagesArePinnedByTag: the base names the image untagged; each
// overlay pins a tag (not latest) with kustomize's image transformer, and
// every tierq container of the build runs exactly that image and a binary
// the project's Dockerfile puts in it. Other images (the dev PostgreSQL,
// the example team's) carry an explicit tag too; the example team's
// containers run its image and one of its mains (examples/thumbnail/cmd).
func TestImagesArePinnedByTag(t *testing.T) {
	t.Parallel()

	// The Dockerfile: every command under cmd/ into /usr/local/bin of a
	// distroless image, run as its nonroot user.
	dockerfile, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	for _, line := range []string{
		"RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./cmd/...",
		"FROM gcr.io/distroless/static-debian12:nonroot",
		"COPY --from=build /out/ /usr/local/bin/",
		"USER nonroot",
	} {
		require.Contains(t, strings.Split(string(dockerfile), "\n"), line, "Dockerfile")
	}
	cmds, err := os.ReadDir("../../cmd")
	require.NoError(t, err)
	var binaries []string
	for _, d := range cmds {
		binaries = append(binaries, "/usr/local/bin/"+d.Name())
	}
	require.Equal(t, []string{"/usr/local/bin/api", "/usr/local/bin/scheduler", "/usr/local/bin/tierctl", "/usr/local/bin/worker"}, binaries)
	exampleCmds, err := os.ReadDir("../../examples/thumbnail/cmd")
	require.NoError(t, err)
	var exampleBinaries []string
	for _, d := range exampleCmds {
		exampleBinaries = append(exampleBinaries, "/usr/local/bin/"+d.Name())
	}

	// The base alone: untagged, so that only an overlay decides.
	baseObjects, err := kustomize(t, variant{name: "base", overlay: "base"})
	require.NoError(t, err)
	base := &build{variant: variant{name: "base"}, objects: baseObjects}
	decoder := strictDecoder()
	for i := range base.objects {
		typed, _, err := decoder.Decode(base.objects[i].raw, nil, nil)
		require.NoError(t, err)
		base.objects[i].typed = typed
	}
	for _, p := range pods(base) {
		for _, c := range p.spec.Containers {
			require.Equal(t, image, c.Image, "base: %s", p.owner)
		}
	}

	for _, b := range builds(t) {
		overlay := b.variant.overlay
		if overlay == "overlays/prod-split" {
			overlay = "overlays/prod" // it builds on prod, whose tag it keeps
		}
		tag := overlayTag(t, overlay)
		require.NotEmpty(t, tag, overlay)
		require.NotEqual(t, "latest", tag, overlay)
		for _, p := range pods(b) {
			for _, c := range p.spec.Containers {
				where := b.variant.name + ": " + p.owner + " container " + c.Name
				_, imageTag, ok := strings.Cut(path.Base(c.Image), ":")
				require.True(t, ok && imageTag != "" && imageTag != "latest" && !strings.Contains(c.Image, "@"), "%s: %s is not pinned by tag", where, c.Image)
				if !isTierq(c) {
					continue
				}
				if strings.HasPrefix(path.Base(c.Command[0]), "thumbnail-") {
					require.True(t, strings.HasPrefix(c.Image, exampleImage+":"), "%s: %s is not the example team's image", where, c.Image)
					require.Contains(t, exampleBinaries, c.Command[0], where)
					continue
				}
				require.Equal(t, image+":"+tag, c.Image, where)
				require.Contains(t, binaries, c.Command[0], where)
			}
		}
	}
}

// exampleImage is the thumbnail example's image, the team's own (untagged).
const exampleImage = "registry.example.com/acme/thumbnail"

// TestExampleJoinsTheReferenceApp: the thumbnail example adds its service
// to the reference app's deployment, one scheduler and one API for both
// (docs/kubernetes.md, "Adding a service"), so the Deployments scheduler
// and api run the example's -with-reference mains from the team's image
// (app.RunSchedulerWithReference, app.RunAPIWithReference: the joined
// registry, the reference app's maintenance and migration line), not its
// thumbnail-scheduler and thumbnail-api, which serve the thumbnail service
// alone. Its worker Deployment runs thumbnail-worker.
func TestExampleJoinsTheReferenceApp(t *testing.T) {
	t.Parallel()

	want := map[string]string{
		"scheduler":          "/usr/local/bin/thumbnail-scheduler-with-reference",
		"api":                "/usr/local/bin/thumbnail-api-with-reference",
		"worker-thumbnailer": "/usr/local/bin/thumbnail-worker",
	}
	example := variantNamed(t, "prod with the thumbnail example")
	split := example // prod-split builds on prod, the example's edit with it
	split.name, split.overlay = "prod-split with the thumbnail example", "overlays/prod-split"
	for _, v := range []variant{example, split} {
		b := buildVariant(t, v)
		for deployment, command := range want {
			where := v.name + ": Deployment/" + deployment
			d := one[*appsv1.Deployment](t, b, deployment)
			require.Len(t, d.Spec.Template.Spec.Containers, 1, where)
			c := d.Spec.Template.Spec.Containers[0]
			require.Equal(t, []string{command}, c.Command, where)
			require.Empty(t, c.Args, where)
			require.True(t, strings.HasPrefix(c.Image, exampleImage+":"), "%s runs %s, not the example team's image", where, c.Image)
		}
	}
}

// TestAnalysisTargetsAreVolumes: the root file system is read-only, so
// every directory a worker reads (ANALYSIS_ROOTS of an analyzer, in its own
// environment) is a volume mounted read-only, and every directory it writes
// (the example thumbnailer's output) a writable one.
func TestAnalysisTargetsAreVolumes(t *testing.T) {
	t.Parallel()

	analyzers := 0
	eachTierqContainer(t, func(t *testing.T, b *build, p pod, c corev1.Container, proc process) {
		where := b.variant.name + ": " + p.owner
		if proc.worker != nil && proc.worker.Service == jobs.ServiceAnalyzer {
			analyzers++
			require.Equal(t, []string{"/srv/repos"}, proc.reads, where)
		}
		check := func(dir string, readOnly bool) {
			for _, m := range c.VolumeMounts {
				if m.MountPath == dir || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPath, "/")+"/") {
					require.Equal(t, readOnly, m.ReadOnly, "%s: %s mounted read-only: %v", where, dir, readOnly)
					require.True(t, slices.ContainsFunc(p.spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }), where)
					return
				}
			}
			t.Fatalf("%s: %s is on the read-only root file system: mount a volume there", where, dir)
		}
		for _, dir := range proc.reads {
			check(dir, true)
		}
		for _, dir := range proc.writes {
			check(dir, false)
		}
	})
	require.Positive(t, analyzers)
}

// versionLabel is the label an overlay sets, next to its image pin, to the
// release the image is; it names the migrate Job.
const versionLabel = "app.kubernetes.io/version"

// overlayVersion is the version label an overlay's kustomization.yaml sets
// (its `labels` entries).
func overlayVersion(t *testing.T, overlay string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(overlay, "kustomization.yaml"))
	require.NoError(t, err)
	var k struct {
		Labels []struct {
			Pairs map[string]string `json:"pairs"`
		} `json:"labels"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &k))
	for _, l := range k.Labels {
		if v, ok := l.Pairs[versionLabel]; ok {
			return v
		}
	}
	return ""
}

// notInDNSLabel is a character a DNS label cannot hold.
var notInDNSLabel = regexp.MustCompile(`[^a-z0-9-]`)

// tagVersion is the version label docs/kubernetes.md says goes with an
// image tag: the tag, lower-cased, with every character other than a
// letter, a digit or '-' made '-' (0.1.0 -> 0-1-0).
func tagVersion(tag string) string {
	return notInDNSLabel.ReplaceAllString(strings.ToLower(tag), "-")
}

// upgradeSelector is what the documented upgrade applies before the
// migrate Job has run: the Job and the configuration it reads.
const upgradeSelector = "app.kubernetes.io/component in (migrate,config)"

// TestMigrateJob: one Job runs tierctl migrate, named after the overlay's
// version label (the release its image pin is, a DNS label) so that a new
// version is a new Job (its template cannot change), and deleted 10
// minutes after it finishes. The documented upgrade's selection is the Job
// and every ConfigMap and Secret it reads, and nothing else.
func TestMigrateJob(t *testing.T) {
	t.Parallel()

	docs, err := os.ReadFile("../../docs/kubernetes.md")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(docs), "-l '"+upgradeSelector+"'"), "docs/kubernetes.md's upgrade selects %q", upgradeSelector)
	selector, err := labels.Parse(upgradeSelector) // as kubectl parses -l
	require.NoError(t, err)

	for _, b := range builds(t) {
		jobsOf := all[*batchv1.Job](b)
		require.Len(t, jobsOf, 1, b.variant.name)
		job := jobsOf[0]
		overlay := b.variant.overlay
		if overlay == "overlays/prod-split" {
			overlay = "overlays/prod"
		}
		version := overlayVersion(t, overlay)
		require.Equal(t, tagVersion(overlayTag(t, overlay)), version, "%s: %s is the tag's", overlay, versionLabel)
		require.Equal(t, version, job.Labels[versionLabel], b.variant.name)
		require.Equal(t, "tierq-migrate-"+version, job.Name, b.variant.name)
		requireJobName(t, b.variant.name, job.Name)
		require.Equal(t, new(int32(600)), job.Spec.TTLSecondsAfterFinished, b.variant.name)
		require.Equal(t, corev1.RestartPolicyNever, job.Spec.Template.Spec.RestartPolicy, b.variant.name)
		require.NotNil(t, job.Spec.BackoffLimit, b.variant.name)
		require.Equal(t, []string{"/usr/local/bin/tierctl", "migrate"}, job.Spec.Template.Spec.Containers[0].Command, b.variant.name)

		// `kubectl apply -k … -l '<upgradeSelector>'` (docs/kubernetes.md,
		// "Upgrades") applies the Job and what it reads: without them the
		// new Job's pod would wait on ConfigMap or Secret names not applied yet.
		var selected, wanted []string
		for _, o := range b.objects {
			if selector.Matches(labels.Set(o.labels)) {
				selected = append(selected, o.kind+"/"+o.name)
			}
		}
		wanted = append(wanted, "Job/"+job.Name)
		for _, c := range job.Spec.Template.Spec.Containers {
			for _, from := range c.EnvFrom {
				if from.ConfigMapRef != nil {
					wanted = append(wanted, "ConfigMap/"+from.ConfigMapRef.Name)
				}
				if from.SecretRef != nil {
					wanted = append(wanted, "Secret/"+from.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				switch {
				case e.ValueFrom == nil:
				case e.ValueFrom.ConfigMapKeyRef != nil:
					wanted = append(wanted, "ConfigMap/"+e.ValueFrom.ConfigMapKeyRef.Name)
				case e.ValueFrom.SecretKeyRef != nil:
					wanted = append(wanted, "Secret/"+e.ValueFrom.SecretKeyRef.Name)
				}
			}
		}
		slices.Sort(wanted)
		slices.Sort(selected)
		require.Equal(t, slices.Compact(wanted), selected, b.variant.name)
	}
}

// requireJobName fails unless name is a valid Job name that also follows
// the stricter rule Kubernetes recommends for them: a DNS label (its pods'
// names and hostnames, its job-name label), so at most 63 characters.
func requireJobName(t *testing.T, where, name string) {
	t.Helper()
	require.Empty(t, validation.IsDNS1123Label(name), "%s: %q is not a DNS label", where, name)
	require.LessOrEqual(t, len(name), validation.DNS1123LabelMaxLength, where)
}

// TestMigrateJobNameFollowsTheVersion: the Job's name never depends on how
// the image is named: pinned by digest, from a registry with a port, it is
// still tierq-migrate-<version>. A version that is not a DNS label (the
// tag as written) is caught.
func TestMigrateJobNameFollowsTheVersion(t *testing.T) {
	t.Parallel()

	const digest = "sha256:4f2d1a0b9c8e7d6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
	b := buildVariant(t, variant{name: "prod by digest", overlay: "overlays/prod", edits: map[string][2]string{
		"overlays/prod/kustomization.yaml": {
			"  - name: ghcr.io/tierq/tierq\n    newTag: \"0.1.0\"\n",
			"  - name: ghcr.io/tierq/tierq\n    newName: registry.example.com:5000/team_a/tierq\n    digest: " + digest + "\n",
		},
	}})
	job := all[*batchv1.Job](b)[0]
	require.Equal(t, "tierq-migrate-0-1-0", job.Name)
	requireJobName(t, b.variant.name, job.Name)
	require.Equal(t, "registry.example.com:5000/team_a/tierq@"+digest, job.Spec.Template.Spec.Containers[0].Image)

	b = buildVariant(t, variant{name: "prod, version as the tag", overlay: "overlays/prod", edits: map[string][2]string{
		"overlays/prod/kustomization.yaml": {"app.kubernetes.io/version: 0-1-0\n", "app.kubernetes.io/version: \"0.1.0\"\n"},
	}})
	job = all[*batchv1.Job](b)[0]
	require.Equal(t, "tierq-migrate-0.1.0", job.Name)
	require.NotEmpty(t, validation.IsDNS1123Label(job.Name), "the check catches a dotted version")
}

// TestDisruptionBudgets: every worker Deployment (each serves a priority
// queue, but the split's default and scheduled ones, which have one too)
// has a PodDisruptionBudget that lets drains take one pod at a time and
// selects exactly its pods; every budget selects the pods of one
// Deployment; and every budget lets a drain evict a pod that is not ready
// (a database outage makes every pod so: it must not block drains).
func TestDisruptionBudgets(t *testing.T) {
	t.Parallel()

	for _, b := range builds(t) {
		budgets := all[*policyv1.PodDisruptionBudget](b)
		for _, pdb := range budgets {
			where := b.variant.name + ": PodDisruptionBudget/" + pdb.Name
			require.Equal(t, new(policyv1.AlwaysAllow), pdb.Spec.UnhealthyPodEvictionPolicy, where)
			require.NotNil(t, one[*appsv1.Deployment](t, b, pdb.Name), where)
			requireSelects(t, where, pdb.Spec.Selector.MatchLabels, b, pdb.Name)
		}
		for name, queues := range workerQueues(t, b) {
			where := b.variant.name + ": Deployment/" + name
			servesPriority := false
			for queue := range queues {
				if _, class, _ := routing.ClassOf(queue); class == routing.Priority {
					servesPriority = true
				}
			}
			i := slices.IndexFunc(budgets, func(p *policyv1.PodDisruptionBudget) bool { return p.Name == name })
			if !servesPriority && i < 0 {
				continue
			}
			require.GreaterOrEqual(t, i, 0, "%s: serves a priority queue: no PodDisruptionBudget", where)
			require.Equal(t, new(intstr.FromInt32(1)), budgets[i].Spec.MaxUnavailable, where)
		}
	}
}

// TestSpreadOverNodes: the scheduler's and every worker Deployment's pods
// spread over nodes where they can (hostname, ScheduleAnyway, a skew of
// 1), counting exactly their own Deployment's pods.
func TestSpreadOverNodes(t *testing.T) {
	t.Parallel()

	for _, b := range builds(t) {
		for _, d := range all[*appsv1.Deployment](b) {
			if d.Name != "scheduler" && !strings.HasPrefix(d.Name, "worker-") {
				continue
			}
			where := b.variant.name + ": Deployment/" + d.Name
			spread := d.Spec.Template.Spec.TopologySpreadConstraints
			require.Len(t, spread, 1, where)
			require.Equal(t, int32(1), spread[0].MaxSkew, where)
			require.Equal(t, "kubernetes.io/hostname", spread[0].TopologyKey, where)
			require.Equal(t, corev1.ScheduleAnyway, spread[0].WhenUnsatisfiable, where)
			requireSelects(t, where, spread[0].LabelSelector.MatchLabels, b, d.Name)
		}
	}
}

// TestSchedulerAndAPI: the scheduler runs two replicas (one leads, one
// stands by) behind a PodDisruptionBudget that keeps one, and reads its
// alert webhook from the Secret only if the key is there; the API's Service
// and PodDisruptionBudget select its pods, and the Service reaches API_ADDR's
// port. Worker Deployments leave their replicas to the autoscaler, except
// in dev, which has none.
func TestSchedulerAndAPI(t *testing.T) {
	t.Parallel()

	for _, b := range builds(t) {
		where := b.variant.name
		schedulerDeployment := one[*appsv1.Deployment](t, b, "scheduler")
		require.Equal(t, new(int32(2)), schedulerDeployment.Spec.Replicas, where)
		// The webhook is optional: a Secret without the key starts a
		// scheduler that logs its alerts only.
		for _, e := range schedulerDeployment.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "DLQ_ALERT_WEBHOOK_URL" {
				require.Equal(t, new(true), e.ValueFrom.SecretKeyRef.Optional, where)
			}
		}
		pdb := one[*policyv1.PodDisruptionBudget](t, b, "scheduler")
		require.Equal(t, new(intstr.FromInt32(1)), pdb.Spec.MinAvailable, where)
		requireSelects(t, where, pdb.Spec.Selector.MatchLabels, b, "scheduler")

		apiDeployment := one[*appsv1.Deployment](t, b, "api")
		service := one[*corev1.Service](t, b, "tierq-api")
		requireSelects(t, where, service.Spec.Selector, b, "api")
		requireSelects(t, where, one[*policyv1.PodDisruptionBudget](t, b, "api").Spec.Selector.MatchLabels, b, "api")
		c := apiDeployment.Spec.Template.Spec.Containers[0]
		proc, err := loadProcess(t, c, containerEnv(t, b, c))
		require.NoError(t, err)
		require.Len(t, service.Spec.Ports, 1, where)
		require.Equal(t, listenPort(t, proc.listen), containerPort(t, c, service.Spec.Ports[0].TargetPort), where)

		for _, d := range all[*appsv1.Deployment](b) {
			if !strings.HasPrefix(d.Name, "worker-") {
				continue
			}
			if b.variant.name == "dev" {
				require.Equal(t, new(int32(1)), d.Spec.Replicas, "%s: %s", where, d.Name)
			} else {
				require.Nil(t, d.Spec.Replicas, "%s: %s: the autoscaler owns its replicas; a number here would reset them at every apply", where, d.Name)
			}
		}
	}
}

// requireSelects checks that selector picks the pods of Deployment name
// and of no other workload in b.
func requireSelects(t *testing.T, where string, selector map[string]string, b *build, name string) {
	t.Helper()
	sel := labels.SelectorFromSet(selector)
	for _, p := range pods(b) {
		var podLabels map[string]string
		for _, o := range b.objects {
			switch d := o.typed.(type) {
			case *appsv1.Deployment:
				if d.Name == p.name {
					podLabels = d.Spec.Template.Labels
				}
			case *batchv1.Job:
				if d.Name == p.name {
					podLabels = d.Spec.Template.Labels
				}
			}
		}
		require.Equal(t, p.name == name, sel.Matches(labels.Set(podLabels)), "%s: selector %v against the pods of %s", where, selector, p.owner)
	}
}

// TestDeploymentSelectorsAreDisjoint: no two workloads' selectors pick the
// same pods (the split's copies of worker-analyzer included), and every
// Deployment's selector picks its own template.
func TestDeploymentSelectorsAreDisjoint(t *testing.T) {
	t.Parallel()

	for _, b := range builds(t) {
		for _, d := range all[*appsv1.Deployment](b) {
			requireSelects(t, b.variant.name, d.Spec.Selector.MatchLabels, b, d.Name)
		}
	}
}

// TestEveryObjectIsLabelled: every object of an overlay carries
// app.kubernetes.io/part-of=tierq, which the documented
// `kubectl apply -l` and `kubectl get -l` rely on, and the overlay's
// version label.
func TestEveryObjectIsLabelled(t *testing.T) {
	t.Parallel()

	for _, b := range builds(t) {
		overlay := b.variant.overlay
		if overlay == "overlays/prod-split" {
			overlay = "overlays/prod"
		}
		version := overlayVersion(t, overlay)
		require.NotEmpty(t, version, overlay)
		for _, o := range b.objects {
			require.Equal(t, "tierq", o.labels["app.kubernetes.io/part-of"], "%s: %s/%s", b.variant.name, o.kind, o.name)
			require.Equal(t, version, o.labels[versionLabel], "%s: %s/%s", b.variant.name, o.kind, o.name)
		}
	}
}
