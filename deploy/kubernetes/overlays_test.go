package kubernetes_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOverlaysBuild builds every overlay (and overlays/prod with each other
// autoscaling component and the example service) with kustomize's Go API;
// buildVariant fails on an object that does not decode strictly into its
// k8s.io/api type or that KEDA's CRD schema refuses.
func TestOverlaysBuild(t *testing.T) {
	t.Parallel()

	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			b := buildVariant(t, v)
			kinds := map[string]int{}
			for _, o := range b.objects {
				kinds[o.kind]++
			}
			t.Logf("%s: %v", v.name, kinds)
		})
	}
}

// TestProdNeedsTheOperatorsSecrets: without overlays/prod/secrets.env, the
// file the operator writes, overlays/prod does not build, so the base's
// placeholders can never reach production.
func TestProdNeedsTheOperatorsSecrets(t *testing.T) {
	t.Parallel()

	for _, overlay := range []string{"overlays/prod", "overlays/prod-split"} {
		_, err := kustomize(t, variant{name: overlay + " without secrets", overlay: overlay, noSecrets: true})
		require.ErrorContains(t, err, "secrets.env", overlay)
	}
}

// TestStrictDecodingCanFail shows that buildVariant's decoding refuses what
// `kubectl apply` with strict field validation refuses.
func TestStrictDecodingCanFail(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "unknown field", want: `unknown field "spec.replica"`,
			give: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"replica":2}}`},
		{name: "misspelt nested field", want: `unknown field "spec.template.spec.containers[0].livenesProbe"`,
			give: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"template":{"spec":{"containers":[{"name":"c","livenesProbe":{}}]}}}}`},
		{name: "wrong type", want: "cannot unmarshal",
			give: `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"x"},"spec":{"backoffLimit":"four"}}`},
		{name: "unknown kind", want: "no kind",
			give: `{"apiVersion":"apps/v1","kind":"Deploymnt","metadata":{"name":"x"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := strictDecoder().Decode([]byte(tt.give), nil, nil)
			require.ErrorContains(t, err, tt.want)
		})
	}
}
