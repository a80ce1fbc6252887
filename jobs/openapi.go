package jobs

import (
	"bytes"
	_ "embed"
	"encoding/json"
)

// The hand-written schemas of the kinds' args in the API's OpenAPI
// document, with the descriptions and limits a generated schema lacks.
var (
	//go:embed openapi/analysis.json
	analysisSchema []byte
	//go:embed openapi/specview.json
	specViewSchema []byte
)

// OpenAPISchema is the schema of the args of POST /v1/jobs for kind
// analysis in the API's OpenAPI document (api.JobArgsWithOpenAPISchema):
// jobs/openapi/analysis.json, the target only (the server sets tier and
// user_id), with its limits.
func (AnalysisArgs) OpenAPISchema() json.RawMessage { return bytes.Clone(analysisSchema) }

// OpenAPISchema is the schema of the args of POST /v1/jobs for kind
// specview in the API's OpenAPI document (api.JobArgsWithOpenAPISchema):
// jobs/openapi/specview.json, the analysis result's id only (the server
// sets tier).
func (SpecViewArgs) OpenAPISchema() json.RawMessage { return bytes.Clone(specViewSchema) }
