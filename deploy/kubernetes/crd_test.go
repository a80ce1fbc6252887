package kubernetes_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdSchema is one served version of a CRD: what the API server checks a
// custom resource of it against.
type crdSchema struct {
	validator  validation.SchemaValidator
	structural *structuralschema.Structural
	cel        *cel.Validator
}

var (
	kedaOnce    sync.Once
	kedaSchemas map[string]crdSchema // by apiVersion + "/" + kind
	kedaErr     error
)

// kedaCRDs loads KEDA's published CRDs (testdata/keda, see its README).
func kedaCRDs(t *testing.T) map[string]crdSchema {
	t.Helper()
	kedaOnce.Do(func() {
		kedaSchemas = map[string]crdSchema{}
		for _, file := range []string{"keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml"} {
			raw, err := os.ReadFile(filepath.Join("testdata", "keda", file))
			if err != nil {
				kedaErr = err
				return
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
				kedaErr = err
				return
			}
			for _, version := range crd.Spec.Versions {
				if !version.Served {
					continue
				}
				var internal apiextensions.JSONSchemaProps
				if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(version.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
					kedaErr = err
					return
				}
				validator, _, err := validation.NewSchemaValidator(&internal)
				if err != nil {
					kedaErr = err
					return
				}
				structural, err := structuralschema.NewStructural(&internal)
				if err != nil {
					kedaErr = err
					return
				}
				kedaSchemas[crd.Spec.Group+"/"+version.Name+"/"+crd.Spec.Names.Kind] = crdSchema{
					validator:  validator,
					structural: structural,
					cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
				}
			}
		}
	})
	require.NoError(t, kedaErr, "KEDA's CRDs")
	return kedaSchemas
}

// kedaErrors checks raw, a KEDA object as JSON, as the API server would
// with strict field validation: its kind and version are served, it has no
// field the schema does not know (what the server would prune), and the
// schema's types, enums and CEL rules hold.
func kedaErrors(t *testing.T, raw []byte) []string {
	t.Helper()
	var obj map[string]any
	require.NoError(t, utiljson.Unmarshal(raw, &obj))
	key, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	schema, ok := kedaCRDs(t)[key+"/"+kind]
	if !ok {
		return []string{"KEDA serves no " + key + " " + kind}
	}
	var problems []string
	for _, err := range validation.ValidateCustomResource(nil, obj, schema.validator) {
		problems = append(problems, err.Error())
	}
	pruned := pruning.PruneWithOptions(runtimeDeepCopy(obj), schema.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, path := range pruned {
		problems = append(problems, "unknown field "+path)
	}
	errs, _ := schema.cel.Validate(context.Background(), field.NewPath(""), schema.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	for _, err := range errs {
		problems = append(problems, err.Error())
	}
	return problems
}

// validateKEDA fails the test when o is not a valid KEDA object.
func validateKEDA(t *testing.T, where string, o *object) {
	t.Helper()
	require.Empty(t, kedaErrors(t, o.raw), "%s: against KEDA's CRD", where)
}

// runtimeDeepCopy copies a JSON object, so that pruning leaves the original.
func runtimeDeepCopy(obj map[string]any) map[string]any {
	raw, err := utiljson.Marshal(obj)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := utiljson.Unmarshal(raw, &out); err != nil {
		panic(err)
	}
	return out
}

// TestKEDAValidationCanFail shows that the CRD check catches what the API
// server would refuse: an unknown field, a wrong type, a broken CEL rule.
func TestKEDAValidationCanFail(t *testing.T) {
	t.Parallel()

	good := `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"w"},
		"spec":{"scaleTargetRef":{"name":"w"},"minReplicaCount":1,"maxReplicaCount":3,
		"triggers":[{"type":"postgresql","metadata":{"query":"SELECT 1","targetQueryValue":"1"}}]}}`
	require.Empty(t, kedaErrors(t, []byte(good)))

	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "unknown field", want: "unknown field spec.minReplicas",
			give: `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"w"},
				"spec":{"scaleTargetRef":{"name":"w"},"minReplicas":1,"triggers":[{"type":"cpu","metadata":{}}]}}`},
		{name: "metadata value not a string", want: "spec.triggers[0].metadata.targetQueryValue",
			give: `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"w"},
				"spec":{"scaleTargetRef":{"name":"w"},"triggers":[{"type":"postgresql","metadata":{"targetQueryValue":5}}]}}`},
		{name: "min above max", want: "minReplicaCount must be less than or equal to maxReplicaCount",
			give: `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"w"},
				"spec":{"scaleTargetRef":{"name":"w"},"minReplicaCount":4,"maxReplicaCount":3,"triggers":[{"type":"cpu","metadata":{}}]}}`},
		{name: "no triggers", want: "spec.triggers",
			give: `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"w"},"spec":{"scaleTargetRef":{"name":"w"}}}`},
		{name: "unknown kind", want: "KEDA serves no keda.sh/v1alpha1 ScaledThing",
			give: `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledThing","metadata":{"name":"w"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			problems := kedaErrors(t, []byte(tt.give))
			require.NotEmpty(t, problems)
			require.Contains(t, strings.Join(problems, "\n"), tt.want)
		})
	}
}
