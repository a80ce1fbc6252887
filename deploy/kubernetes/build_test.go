package kubernetes_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// image is the image the project's Dockerfile builds, as the manifests
// name it; the overlays pin its tag.
const image = "ghcr.io/tierq/tierq"

// prodSecrets is what an operator writes to overlays/prod/secrets.env.
const prodSecrets = `DATABASE_URL=postgres://tierq:s3cret-pass@db.example.com:5432/tierq?sslmode=require
API_TOKEN=6f1c0e5b2a9d4e7f8a1b3c5d7e9f0a2b
API_ADMIN_TOKEN=0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a
DLQ_ALERT_WEBHOOK_URL=https://hooks.example.com/tierq
`

// variant is one way to build the manifests: an overlay as it is in the
// repository, or with the edit docs/kubernetes.md tells an operator to make.
type variant struct {
	name    string
	overlay string // directory under deploy/kubernetes
	// edits replace text in files of the tree (path under
	// deploy/kubernetes → old → new); the text must be there.
	edits map[string][2]string
	// noSecrets leaves overlays/prod/secrets.env out, as a fresh checkout has it.
	noSecrets bool
}

// componentsLine is the autoscaling component overlays/prod lists.
const componentsLine = "components:\n  - ../../components/keda\n"

// variants are every build the tests check: each overlay, and overlays/prod
// with each other autoscaling component and with the example service.
var variants = []variant{
	{name: "dev", overlay: "overlays/dev"},
	{name: "prod", overlay: "overlays/prod"},
	{name: "prod-split", overlay: "overlays/prod-split"},
	{name: "prod with keda-prometheus", overlay: "overlays/prod", edits: map[string][2]string{
		"overlays/prod/kustomization.yaml": {componentsLine, "components:\n  - ../../components/keda-prometheus\n"},
	}},
	{name: "prod with hpa", overlay: "overlays/prod", edits: map[string][2]string{
		"overlays/prod/kustomization.yaml": {componentsLine, "components:\n  - ../../components/hpa\n"},
	}},
	{name: "prod with the thumbnail example", overlay: "overlays/prod", edits: map[string][2]string{
		"overlays/prod/kustomization.yaml": {componentsLine, componentsLine + "  - ../../examples/thumbnail\n"},
	}},
}

// variantNamed returns the variant called name.
func variantNamed(t *testing.T, name string) variant {
	t.Helper()
	for _, v := range variants {
		if v.name == name {
			return v
		}
	}
	t.Fatalf("no variant %q", name)
	return variant{}
}

// object is one object of a build.
type object struct {
	apiVersion, kind, name, namespace string
	// raw is the object as JSON, as `kubectl apply` would send it.
	raw []byte
	// typed is the object decoded into its k8s.io/api type (nil for KEDA's
	// objects, which have none here).
	typed runtime.Object
	// labels are the object's metadata labels.
	labels map[string]string
}

// build is one variant built: its objects in kustomize's output order.
type build struct {
	variant variant
	objects []object
}

// moduleDir is deploy/kubernetes, where the tests run.
func moduleDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	return dir
}

// treeFS copies the manifests under dir into an in-memory file system at
// the same paths, leaving out the operator's own secrets files, and applies
// the variant's edits and secrets.
func treeFS(t *testing.T, dir string, v variant) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "secrets.env" && strings.HasPrefix(rel, "overlays"+string(filepath.Separator)) {
			return nil // an operator's file in this checkout: the tests write their own
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".env" && ext != ".example" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile(path, data)
	})
	require.NoError(t, err)
	if !v.noSecrets {
		require.NoError(t, mem.WriteFile(filepath.Join(dir, "overlays/prod/secrets.env"), []byte(prodSecrets)))
	}
	for file, edit := range v.edits {
		path := filepath.Join(dir, file)
		data, err := mem.ReadFile(path)
		require.NoError(t, err)
		require.Contains(t, string(data), edit[0], "%s: the text this variant replaces", file)
		require.NoError(t, mem.WriteFile(path, []byte(strings.Replace(string(data), edit[0], edit[1], 1))))
	}
	return mem
}

// kustomize builds v as `kubectl apply -k` would, and returns the error.
func kustomize(t *testing.T, v variant) ([]object, error) {
	t.Helper()
	dir := moduleDir(t)
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(treeFS(t, dir, v), filepath.Join(dir, v.overlay))
	if err != nil {
		return nil, err
	}
	var objects []object
	for _, r := range resMap.Resources() {
		raw, err := r.MarshalJSON()
		require.NoError(t, err)
		objects = append(objects, object{
			apiVersion: r.GetApiVersion(), kind: r.GetKind(), name: r.GetName(), namespace: r.GetNamespace(),
			raw: raw, labels: r.GetLabels(),
		})
	}
	return objects, nil
}

// buildVariant builds v, decodes every object strictly (unknown fields
// fail) into its k8s.io/api type and validates KEDA's objects against
// KEDA's CRD schema.
func buildVariant(t *testing.T, v variant) *build {
	t.Helper()
	objects, err := kustomize(t, v)
	require.NoError(t, err, "kustomize build %s", v.name)
	require.NotEmpty(t, objects)
	decoder := strictDecoder()
	for i := range objects {
		o := &objects[i]
		where := v.name + ": " + o.kind + "/" + o.name
		if strings.HasPrefix(o.apiVersion, "keda.sh/") {
			validateKEDA(t, where, o)
			continue
		}
		typed, gvk, err := decoder.Decode(o.raw, nil, nil)
		require.NoError(t, err, "%s: strict decoding into its k8s.io/api type", where)
		require.Equal(t, o.apiVersion, gvk.GroupVersion().String(), where)
		o.typed = typed
	}
	return &build{variant: v, objects: objects}
}

// scheme knows the kinds the manifests may hold, besides KEDA's.
func strictDecoder() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Strict: true})
}

// all returns the build's objects of type T.
func all[T runtime.Object](b *build) []T {
	var out []T
	for _, o := range b.objects {
		if typed, ok := o.typed.(T); ok {
			out = append(out, typed)
		}
	}
	return out
}

// one returns the build's object of type T named name.
func one[T interface {
	runtime.Object
	GetName() string
}](t *testing.T, b *build, name string) T {
	t.Helper()
	for _, typed := range all[T](b) {
		if typed.GetName() == name {
			return typed
		}
	}
	var zero T
	t.Fatalf("%s: no %T named %q", b.variant.name, zero, name)
	return zero
}

var (
	builtMu sync.Mutex
	built   = map[string]*build{}
)

// builds returns every variant built, each built once per test binary
// (the tests only read them).
func builds(t *testing.T) []*build {
	t.Helper()
	builtMu.Lock()
	defer builtMu.Unlock()
	out := make([]*build, len(variants))
	for i, v := range variants {
		if built[v.name] == nil {
			built[v.name] = buildVariant(t, v)
		}
		out[i] = built[v.name]
	}
	return out
}

// builtNamed returns the variant called name, built once per test binary.
func builtNamed(t *testing.T, name string) *build {
	t.Helper()
	for _, b := range builds(t) {
		if b.variant.name == name {
			return b
		}
	}
	t.Fatalf("no variant %q", name)
	return nil
}
