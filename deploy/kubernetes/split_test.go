package kubernetes_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// docsBlock returns the first fenced block of language lang in
// docs/kubernetes.md after the line heading.
func docsBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/kubernetes.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(raw), "\n"+heading+"\n")
	require.True(t, ok, "docs/kubernetes.md has no %q", heading)
	_, block, ok := strings.Cut(section, "```"+lang+"\n")
	require.True(t, ok, "no %s block after %q", lang, heading)
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)
	return block
}

// withAnalysisRoots is v with the patch docs/kubernetes.md ("Analysis
// targets") tells an operator to add to overlays/prod/kustomization.yaml.
func withAnalysisRoots(t *testing.T, v variant) variant {
	t.Helper()
	patch := docsBlock(t, "### Analysis targets", "yaml")
	require.Contains(t, patch, "claimName: checkouts")
	v.name += " and the analysis-roots patch"
	edits := map[string][2]string{}
	for file, edit := range v.edits {
		edits[file] = edit
	}
	const file = "overlays/prod/kustomization.yaml"
	old, new := componentsLine, componentsLine
	if e, ok := edits[file]; ok {
		old, new = e[0], e[1]
	}
	edits[file] = [2]string{old, patch + "\n" + new}
	v.edits = edits
	return v
}

// splitCopies are the Deployments components/split-by-class makes of
// worker-analyzer.
var splitCopies = []string{"worker-analyzer-priority", "worker-analyzer-default", "worker-analyzer-scheduled"}

// ownEnv are the variables each copy of the split sets for itself.
var ownEnv = []string{"ANALYZER_QUEUE_PRIORITY_WORKERS", "ANALYZER_QUEUE_DEFAULT_WORKERS", "ANALYZER_QUEUE_SCHEDULED_WORKERS", "DATABASE_MAX_CONNS"}

// withoutOwn is spec without what a copy of the split sets for itself: its
// worker counts, its pool and the label of its own pods in its spread.
func withoutOwn(spec corev1.PodSpec) corev1.PodSpec {
	spec = *spec.DeepCopy()
	for i := range spec.Containers {
		spec.Containers[i].Env = slices.DeleteFunc(spec.Containers[i].Env, func(e corev1.EnvVar) bool {
			return slices.Contains(ownEnv, e.Name)
		})
	}
	for i := range spec.TopologySpreadConstraints {
		if sel := spec.TopologySpreadConstraints[i].LabelSelector; sel != nil {
			delete(sel.MatchLabels, "app.kubernetes.io/component")
		}
	}
	return spec
}

// TestSplitCopiesWorkerAnalyzer: in prod-split each Deployment of the split
// is prod's worker-analyzer as prod leaves it (its pod spec, pod
// annotations and strategy) but for its name, labels, selector, worker
// counts, pool and the pods its spread counts: an operator's patch of
// worker-analyzer in prod (the documented analysis-roots volume), or a
// component listed there (the thumbnail example, which patches the
// scheduler's image), reaches every copy the same, and nothing of another
// Deployment does. worker-analyzer itself, its PodDisruptionBudget and its
// ScaledObject are gone.
func TestSplitCopiesWorkerAnalyzer(t *testing.T) {
	t.Parallel()

	example := variantNamed(t, "prod with the thumbnail example")
	splitOf := func(v variant) variant {
		v.name = strings.Replace(v.name, "prod", "prod-split", 1)
		v.overlay = "overlays/prod-split"
		return v
	}
	for _, prod := range []variant{
		variantNamed(t, "prod"),
		withAnalysisRoots(t, variantNamed(t, "prod")),
		example,
		withAnalysisRoots(t, example),
	} {
		t.Run(prod.name, func(t *testing.T) {
			t.Parallel()
			p := buildVariant(t, prod)
			s := buildVariant(t, splitOf(prod))
			original := one[*appsv1.Deployment](t, p, "worker-analyzer")
			for _, name := range splitCopies {
				c := one[*appsv1.Deployment](t, s, name)
				require.Equal(t, withoutOwn(original.Spec.Template.Spec), withoutOwn(c.Spec.Template.Spec), "%s: %s's pod spec", s.variant.name, name)
				require.Equal(t, original.Spec.Template.Annotations, c.Spec.Template.Annotations, name)
				require.Equal(t, original.Spec.Strategy, c.Spec.Strategy, name)
				require.Equal(t, name, c.Spec.Template.Labels["app.kubernetes.io/component"], name)
			}
			for _, o := range s.objects {
				require.NotEqual(t, "worker-analyzer", o.name, "%s: %s/%s is left", s.variant.name, o.kind, o.name)
			}
			require.Len(t, all[*policyv1.PodDisruptionBudget](s), len(all[*appsv1.Deployment](s)), "a budget per Deployment, none left over")
		})
	}
}

// TestAnalysisRootsPatchReachesEveryAnalyzer: the patch docs/kubernetes.md
// gives for the analysis-roots volume, added to overlays/prod, replaces
// the placeholder in every Deployment of the analyzer's workers, in prod
// (one) and in prod-split (three), and changes nothing else of the volumes.
func TestAnalysisRootsPatchReachesEveryAnalyzer(t *testing.T) {
	t.Parallel()

	want := corev1.Volume{Name: "analysis-roots", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "checkouts", ReadOnly: true},
	}}
	for overlay, analyzers := range map[string]int{"prod": 1, "prod-split": 3} {
		b := buildVariant(t, withAnalysisRoots(t, variantNamed(t, overlay)))
		seen := 0
		for _, d := range all[*appsv1.Deployment](b) {
			for _, c := range d.Spec.Template.Spec.Containers {
				if isTierq(c) && containerEnv(t, b, c)["WORKER_SERVICE"] == "analyzer" {
					require.Equal(t, []corev1.Volume{want}, d.Spec.Template.Spec.Volumes, "%s: %s", b.variant.name, d.Name)
					seen++
				}
			}
		}
		require.Equal(t, analyzers, seen, b.variant.name)
	}
}
