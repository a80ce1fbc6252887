package jobs_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/jobs"
)

var (
	_ api.JobArgsWithOpenAPISchema = jobs.AnalysisArgs{}
	_ api.JobArgsWithOpenAPISchema = jobs.SpecViewArgs{}
)

// TestOpenAPISchemasDescribeTheArgs: the kinds' hand-written args schemas
// (jobs/openapi/*.json) still describe their args types, field for field,
// as api.OpenAPIFor checks; the API's document has them with their
// descriptions and limits. docs/openapi.json is the whole document
// (api.TestOpenAPIDocs).
func TestOpenAPISchemasDescribeTheArgs(t *testing.T) {
	t.Parallel()
	registry, err := jobs.Registry(jobs.Deps{})
	require.NoError(t, err)
	doc, err := api.OpenAPIFor(registry)
	require.NoError(t, err)

	var read struct {
		Components struct {
			Schemas struct {
				CreateJob struct {
					Properties struct {
						Args struct {
							OneOf []json.RawMessage `json:"oneOf"`
						} `json:"args"`
					} `json:"properties"`
				} `json:"CreateJob"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(doc, &read))
	oneOf := read.Components.Schemas.CreateJob.Properties.Args.OneOf
	require.Len(t, oneOf, 2)
	require.JSONEq(t, `{
		"x-kind": "analysis",
		"type": "object",
		"additionalProperties": false,
		"required": ["target"],
		"properties": {
			"target": {
				"type": "string",
				"description": "Clean absolute directory path on the workers, in one of ANALYSIS_ROOTS (kind analysis); a target outside them is a 400.",
				"maxLength": 4096
			}
		}
	}`, string(oneOf[0]))
	require.JSONEq(t, `{
		"x-kind": "specview",
		"type": "object",
		"additionalProperties": false,
		"required": ["analysis_result_id"],
		"properties": {"analysis_result_id": {"type": "integer", "format": "int64", "minimum": 1}}
	}`, string(oneOf[1]))
}

// TestOpenAPISchemaIsACopy: changing the schema an args value returned
// changes no other.
func TestOpenAPISchemaIsACopy(t *testing.T) {
	t.Parallel()
	s := jobs.AnalysisArgs{}.OpenAPISchema()
	s[0] = 'x'
	require.True(t, json.Valid(jobs.AnalysisArgs{}.OpenAPISchema()))
}
