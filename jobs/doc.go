// Package jobs holds tierq's job kinds: their args (a public contract, see
// docs/jobs.md, since producers in other languages insert River jobs too) and
// their River workers.
//
//   - analysis (Analyzer service): counts the test cases in a directory and
//     writes an analysis_results row, then chains a specview job.
//   - specview (SpecGenerator service): renders an analysis result as a spec
//     document into spec_documents.
//   - loadtest: the load-test workload. It sleeps for the time its args say
//     and does nothing else; it exists for tests and load tests and is only
//     registered when a worker is configured with LOAD_TEST_WORKLOAD=true.
//   - reanalyze_stale and retention: the analyzer's maintenance, cron jobs
//     that the scheduler deployment runs and works in its own queue
//     (Maintenance, Deps.Maintenance): re-analysis of stale targets and
//     deletion of old results and spec documents.
//
// Registry is the reference app's service.Registry of the two services.
// AnalysisArgs and SpecViewArgs describe themselves in the API's OpenAPI
// document with hand-written schemas (OpenAPISchema, from openapi/*.json;
// api.JobArgsWithOpenAPISchema).
//
// Every worker writes its result, chains its follow-up job and completes its
// River job in one transaction (river.JobCompleteTx), so a job delivered twice
// (River is at-least-once) leaves one result and one follow-up. Arguments that
// can never work (a target that is not a directory, args of the wrong JSON
// types, a missing result) cancel the job with the reason instead of retrying
// it.
package jobs

import (
	"encoding/json"
	"fmt"

	"github.com/riverqueue/river"
)

// decodeArgs is what every args type's UnmarshalJSON does: decode strictly
// into dst, and on failure keep the error in *decodeErr instead of returning
// it. River treats an unmarshal error as a transient failure and retries it;
// by deferring it to Work, the job is cancelled with the reason at once.
func decodeArgs[T any](data []byte, dst *T, decodeErr *error) error {
	if err := json.Unmarshal(data, dst); err != nil {
		*decodeErr = err
	}
	return nil
}

// cancelBadArgs cancels a job whose args did not decode or validate.
func cancelBadArgs(kind string, err error) error {
	return river.JobCancel(fmt.Errorf("bad %s args: %w", kind, err))
}
