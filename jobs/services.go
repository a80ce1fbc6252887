package jobs

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tierq/tierq/service"
)

// Names of the reference app's two services (ADR-16), the values of
// WORKER_SERVICE.
const (
	ServiceAnalyzer = "analyzer"
	ServiceSpecGen  = "specgen"
)

// Base queues of the two services: analysis_priority, analysis_default and
// analysis_scheduled; specview_priority, specview_default and
// specview_scheduled.
const (
	analysisBaseQueue = "analysis"
	specViewBaseQueue = "specview"
)

// Deps are what the reference app's workers need.
type Deps struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// AnalysisRoots are the directories analysis targets must be in
	// (ANALYSIS_ROOTS); none means any directory.
	AnalysisRoots []string
	// Maintenance, when set, gives the analyzer its periodic jobs (the
	// re-analysis of stale targets and retention) and their kinds, which
	// the scheduler deployment runs and works (Registry.PeriodicJobs,
	// Registry.AddWorkers). Nil (every other deployment): none.
	Maintenance *Maintenance
}

// AnalyzerService is the analysis service: kind analysis in the queues
// analysis_priority, analysis_default and analysis_scheduled, worked by 5,
// 3 and 2 workers per process by default. With deps.Maintenance it has its
// periodic jobs too: kinds reanalyze_stale and retention, cron jobs of the
// scheduler.
func AnalyzerService(deps Deps) (*service.Service, error) {
	analysis := service.WorkerKind(NewAnalysisWorker(deps.Pool, deps.Logger, deps.AnalysisRoots...),
		service.Timeout[AnalysisArgs](AnalysisTimeout), service.Check(analysisRequest(deps.AnalysisRoots)))
	cfg := &service.Config{
		Name:      ServiceAnalyzer,
		BaseQueue: analysisBaseQueue,
		Kinds:     []service.Kind{analysis},
		Workers:   &service.ClassWorkers{Priority: 5, Default: 3, Scheduled: 2},
	}
	if deps.Maintenance != nil {
		var err error
		cfg.PeriodicJobs, cfg.PeriodicKinds, err = deps.Maintenance.periodic(deps, cfg.BaseQueue, analysis)
		if err != nil {
			return nil, err
		}
	}
	return service.New(cfg)
}

// SpecGenService is the spec generator: kind specview in the queues
// specview_priority, specview_default and specview_scheduled, worked by 3,
// 2 and 1 workers per process by default.
func SpecGenService(deps Deps) (*service.Service, error) {
	return service.New(&service.Config{
		Name:      ServiceSpecGen,
		BaseQueue: specViewBaseQueue,
		Kinds: []service.Kind{service.WorkerKind(NewSpecViewWorker(deps.Pool, deps.Logger),
			service.Timeout[SpecViewArgs](SpecViewTimeout), service.Check(specViewRequest))},
		Workers: &service.ClassWorkers{Priority: 3, Default: 2, Scheduled: 1},
	})
}

// Registry is the reference app's registry: the analyzer, then the spec
// generator.
func Registry(deps Deps) (*service.Registry, error) {
	analyzer, err := AnalyzerService(deps)
	if err != nil {
		return nil, err
	}
	specgen, err := SpecGenService(deps)
	if err != nil {
		return nil, err
	}
	return service.NewRegistry(analyzer, specgen)
}
