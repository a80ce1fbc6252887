package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/riverqueue/river"

	"github.com/tierq/tierq/jobs/scan"
	"github.com/tierq/tierq/tiers"
)

// errServerFields refuses a request whose args set what the server sets.
var errServerFields = errors.New("args may not set tier or user_id: the server sets both")

// maxTargetLen bounds an analysis target path.
const maxTargetLen = 4096

// analysisRequest checks an analysis requested over the API
// (service.Check): no tier or user id (the server's), and a target the
// analyzer may read, by the lexical rule of CheckTarget.
func analysisRequest(roots []string) func(AnalysisArgs) error {
	return func(a AnalysisArgs) error {
		if a.Tier != "" || a.UserID != "" {
			return errServerFields
		}
		return CheckTarget(a.Target, roots)
	}
}

// specViewRequest checks a spec requested over the API: no tier.
func specViewRequest(a SpecViewArgs) error {
	if a.Tier != "" {
		return errServerFields
	}
	return nil
}

// CheckTarget accepts a clean absolute path (no "..", no NUL, bounded) in
// one of roots, or anywhere when there are none. The check is lexical: the
// API and tierctl cannot see the workers' file system, so the analyzer
// checks again after resolving symlinks.
func CheckTarget(target string, roots []string) error {
	switch {
	case target == "":
		return errors.New("args.target is required")
	case len(target) > maxTargetLen:
		return fmt.Errorf("args.target is longer than %d bytes", maxTargetLen)
	case strings.ContainsRune(target, 0):
		return errors.New("args.target contains a NUL byte")
	case !path.IsAbs(target) || path.Clean(target) != target:
		return errors.New("args.target must be a clean absolute path (no '..', no trailing slash)")
	case len(roots) > 0 && !scan.Within(target, roots):
		return fmt.Errorf("args.target %q is outside the analysis roots %s (ANALYSIS_ROOTS)", target, strings.Join(roots, ":"))
	}
	return nil
}

// WithTier is a copy of the args with the job's tier and tenant in their own
// fields too, for workers and producers that read them from args
// (producer.TierFields). An unknown tier or an empty tenant leaves the
// field as it is.
func (a AnalysisArgs) WithTier(tier tiers.Tier, tenant string) river.JobArgs {
	a.Tier, a.UserID = orTier(tier, a.Tier), cmp.Or(tenant, a.UserID)
	return a
}

// WithTier is a copy of the args with the job's tier in its own field too.
func (a SpecViewArgs) WithTier(tier tiers.Tier, _ string) river.JobArgs {
	a.Tier = orTier(tier, a.Tier)
	return a
}

// orTier is tier's name, or current for an unknown tier.
func orTier(tier tiers.Tier, current string) string {
	if tier.Valid() {
		return tier.String()
	}
	return current
}
