package specdoc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobs/scan"
	"github.com/tierq/tierq/jobs/specdoc"
)

func TestSentence(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		framework scan.Framework
		give      string
		want      string
	}{
		{name: "go subject and behaviour", framework: scan.Go, give: "TestSelectQueue_UnknownTierGoesDefault", want: "Select queue: unknown tier goes default"},
		{name: "go subject only", framework: scan.Go, give: "TestParse", want: "Parse"},
		{name: "go several underscores", framework: scan.Go, give: "TestParse_EmptyString_ReturnsError", want: "Parse: empty string returns error"},
		{name: "go acronyms", framework: scan.Go, give: "TestHTTPServer_ReturnsOK", want: "HTTP server: returns OK"},
		{name: "go digits", framework: scan.Go, give: "TestDecodeV2Args", want: "Decode V2 args"},
		{name: "go bare Test", framework: scan.Go, give: "Test", want: "Test"},
		{name: "go leading underscore", framework: scan.Go, give: "Test_Underscore", want: "Underscore"},
		{name: "pytest function", framework: scan.Pytest, give: "test_select_queue_unknown_tier", want: "Select queue unknown tier"},
		{name: "pytest class", framework: scan.Pytest, give: "TestCalc::test_mul_by_zero", want: "Calc: mul by zero"},
		{name: "pytest camel class", framework: scan.Pytest, give: "TestHTTPClient::test_retries", want: "HTTP client: retries"},
		{name: "js title", framework: scan.JS, give: "adds numbers", want: "Adds numbers"},
		{name: "js already capitalised", framework: scan.JS, give: "Renders the widget", want: "Renders the widget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, specdoc.Sentence(tt.framework, tt.give))
		})
	}
}

func TestRender(t *testing.T) {
	t.Parallel()

	doc := specdoc.Render("/src/app", "0123456789abcdef0123456789abcdef01234567", []scan.Test{
		{File: "web/app.test.js", Name: "adds numbers", Framework: scan.JS, Line: 4},
		{File: "routing/routing_test.go", Name: "TestSelectQueue_UnknownTierGoesDefault", Framework: scan.Go, Line: 20},
		{File: "routing/routing_test.go", Name: "TestParse", Framework: scan.Go, Line: 10},
	})
	require.Equal(t, "Spec: /src/app", doc.Title)
	require.Equal(t, `# Spec: /src/app

3 tests at commit 0123456789ab.

## routing/routing_test.go

- Parse
- Select queue: unknown tier goes default

## web/app.test.js

- Adds numbers
`, doc.Content)
}
