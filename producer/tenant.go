package producer

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tierq/tierq/jobmeta"
)

// TenantHook is a River insert hook that refuses a job whose tenant (the
// string under jobmeta.Tenant in its insert metadata) breaks tierq's rule
// for tenant ids, jobmeta.CheckTenant: at most 200 bytes of UTF-8, no
// control characters. The insert fails before anything is written, with an
// error that matches jobmeta.ErrInvalidTenant; in a batch (InsertMany) the
// whole batch fails. Jobs without a tenant, or whose metadata is not a JSON
// object, pass.
//
// It is how the rule holds for the insert options routing.InsertOptsFor,
// routing.InsertMetadata and service.(*Service).InsertOpts make, which
// return no error: River runs the hook on the metadata they made (after
// any insert middleware, just before the row is written; River adds
// nothing to a job's metadata at insert). ClientConfig installs it, so
// every client made from ClientConfig has it: the API's, tierctl's and a
// producer's. A producer that makes its River client from a river.Config
// of its own adds it to Hooks:
//
//	cfg.Hooks = append(cfg.Hooks, &producer.TenantHook{})
//
// tierq's worker and scheduler deployments do not install it: the tenants
// of the jobs they insert (a chained next step, a re-analysis) come from
// jobs and results already in the database, and a row inserted directly
// that breaks the rule is still worked (docs/jobs.md); refusing its
// follow-up work would fail the job that chains it, or a whole page of
// re-analyses, on every attempt.
type TenantHook struct {
	river.HookDefaults
}

var _ rivertype.HookInsertBegin = (*TenantHook)(nil)

// InsertBegin checks the tenant in params.Metadata (jobmeta.CheckTenantIn).
func (*TenantHook) InsertBegin(_ context.Context, params *rivertype.JobInsertParams) error {
	if err := jobmeta.CheckTenantIn(params.Metadata); err != nil {
		return fmt.Errorf("%s job: %w", params.Kind, err)
	}
	return nil
}
