package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/riverqueue/river"
	"github.com/spf13/pflag"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/ctl"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/jobs/scan"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// analysisEnqueue is what the stock tierctl's enqueue inserts without
// --kind: analysis jobs of the reference app's analyzer for the --target
// directories, each checked against ANALYSIS_ROOTS as the API checks it.
func (a *app) analysisEnqueue() *ctl.Enqueue {
	var targets []string
	return &ctl.Enqueue{
		Name:  "analysis",
		Short: "Insert demo analysis jobs, or jobs of any known kind (--kind), across every tier, routed as a producer would",
		Long: `Insert COUNT analysis jobs for the given target directories, cycling through
the tiers in the proportions of --mix, with a share of them marked as scheduled
(background) work. Each job is routed by the analyzer service's InsertOpts
(routing.InsertOptsFor), exactly as an API service does, and inserted in
batches. A progress bar shows the inserts.

Each target must be in one of ANALYSIS_ROOTS (colon-separated absolute
directories; default /), checked as the API checks it: the analyzer workers
cancel a job whose target is elsewhere.`,
		Example: `  tierctl enqueue --count 200 --target . --target ./jobs --mix free=5,pro=3,enterprise=2`,
		Flags: func(flags *pflag.FlagSet) {
			flags.StringArrayVar(&targets, "target", []string{"."}, "directory to analyse (repeatable; jobs cycle through them)")
		},
		Prepare: func(environ []string) (*service.Service, func(int, tiers.Tier, string) river.JobArgs, error) {
			analysis, err := config.LoadSection[jobsconfig.AnalysisConfig](environ)
			if err != nil {
				return nil, nil, err
			}
			absTargets, err := checkTargets(targets, analysis.Roots)
			if err != nil {
				return nil, nil, &ctl.UsageError{Err: err}
			}
			// The reference app's registry without its workers'
			// dependencies: tierctl runs none of its workers.
			registry, err := jobs.Registry(jobs.Deps{})
			if err != nil {
				return nil, nil, err
			}
			analyzer, err := registry.Parse(jobs.ServiceAnalyzer)
			if err != nil {
				return nil, nil, err
			}
			return analyzer, func(i int, tier tiers.Tier, userID string) river.JobArgs {
				return jobs.AnalysisArgs{Target: absTargets[i%len(absTargets)], UserID: userID, Tier: tier.String()}
			}, nil
		},
	}
}

// checkTargets makes each target absolute and checks that it is a
// directory here and, lexically as the API does, in one of roots.
func checkTargets(targets []string, roots jobs.AnalysisRoots) ([]string, error) {
	if len(targets) == 0 {
		return nil, errors.New("--target: at least one directory is needed")
	}
	abs := make([]string, len(targets))
	for i, target := range targets {
		info, err := os.Stat(target)
		if err != nil || !info.IsDir() {
			return nil, fmt.Errorf("--target %q is not a directory", target)
		}
		if abs[i], err = filepath.Abs(target); err != nil {
			return nil, fmt.Errorf("--target %q: %w", target, err)
		}
		if !scan.Within(abs[i], roots) {
			return nil, fmt.Errorf("--target %q (%s) is outside the analysis roots %s (ANALYSIS_ROOTS)", target, abs[i], roots)
		}
	}
	return abs, nil
}
