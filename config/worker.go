package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tierq/tierq/routing"
)

// MaxQueueWorkers is River's own limit on one queue's workers in one process.
const MaxQueueWorkers = 10_000

// Worker is the configuration of a worker deployment (cmd/worker): one process
// serving the three queues of one service.
type Worker struct {
	Database
	Logging
	Jobs
	Observability
	Analysis

	// Service is the service this deployment works: analyzer or specgen.
	// Required; a deployment serves exactly one service, so an Analyzer worker
	// never receives SpecGenerator kinds.
	Service routing.Service `env:"WORKER_SERVICE,required"`

	// Worker counts per queue, per process (River's MaxWorkers). 0 means this
	// deployment does not serve that queue; at least one of the service's
	// queues must be served. ADR-16's defaults give the priority queue half of
	// the capacity.
	AnalyzerPriorityWorkers  int `env:"ANALYZER_QUEUE_PRIORITY_WORKERS" envDefault:"5"`
	AnalyzerDefaultWorkers   int `env:"ANALYZER_QUEUE_DEFAULT_WORKERS" envDefault:"3"`
	AnalyzerScheduledWorkers int `env:"ANALYZER_QUEUE_SCHEDULED_WORKERS" envDefault:"2"`
	SpecGenPriorityWorkers   int `env:"SPECGEN_QUEUE_PRIORITY_WORKERS" envDefault:"3"`
	SpecGenDefaultWorkers    int `env:"SPECGEN_QUEUE_DEFAULT_WORKERS" envDefault:"2"`
	SpecGenScheduledWorkers  int `env:"SPECGEN_QUEUE_SCHEDULED_WORKERS" envDefault:"1"`

	// Fetch tuning per queue class. The cooldown is the shortest time between
	// two fetches of a queue (it bounds throughput: at most MaxWorkers jobs per
	// cooldown); the poll interval is how often an idle queue looks for work
	// when no LISTEN/NOTIFY wake-up came. Priority queues want low pickup
	// latency; scheduled queues can wait. The priority defaults come from
	// tierctl bench isolation (docs/benchmarks.md): 10ms keeps the pickup
	// p99 of a paid stream in single-digit milliseconds, and a 250ms poll
	// caps the wait of a job whose insert sent no wake-up, for about 3 more
	// idle queries per second per process.
	PriorityFetchCooldown      time.Duration `env:"QUEUE_PRIORITY_FETCH_COOLDOWN" envDefault:"10ms"`
	PriorityFetchPollInterval  time.Duration `env:"QUEUE_PRIORITY_FETCH_POLL_INTERVAL" envDefault:"250ms"`
	DefaultFetchCooldown       time.Duration `env:"QUEUE_DEFAULT_FETCH_COOLDOWN" envDefault:"100ms"`
	DefaultFetchPollInterval   time.Duration `env:"QUEUE_DEFAULT_FETCH_POLL_INTERVAL" envDefault:"1s"`
	ScheduledFetchCooldown     time.Duration `env:"QUEUE_SCHEDULED_FETCH_COOLDOWN" envDefault:"250ms"`
	ScheduledFetchPollInterval time.Duration `env:"QUEUE_SCHEDULED_FETCH_POLL_INTERVAL" envDefault:"2s"`

	// LoadTestWorkload registers the load-test workload kind (`loadtest`, a
	// job that sleeps for the time its args say) on this worker, for tests
	// and load tests only. Default false.
	LoadTestWorkload bool `env:"LOAD_TEST_WORKLOAD" envDefault:"false"`
}

// QueueClass is the River tuning of one class of queue.
type QueueClass struct {
	Workers       int
	FetchCooldown time.Duration
	PollInterval  time.Duration
}

// Queues returns the configured queues of this deployment's service, keyed by
// queue name, with queues of 0 workers left out.
func (w *Worker) Queues() map[string]QueueClass {
	counts := w.workerCounts()
	queues := map[string]QueueClass{}
	for class, n := range counts {
		if n == 0 {
			continue
		}
		qc := QueueClass{Workers: n}
		switch class {
		case routing.Priority:
			qc.FetchCooldown, qc.PollInterval = w.PriorityFetchCooldown, w.PriorityFetchPollInterval
		case routing.Default:
			qc.FetchCooldown, qc.PollInterval = w.DefaultFetchCooldown, w.DefaultFetchPollInterval
		case routing.Scheduled:
			qc.FetchCooldown, qc.PollInterval = w.ScheduledFetchCooldown, w.ScheduledFetchPollInterval
		}
		queues[w.Service.Queue(class)] = qc
	}
	return queues
}

func (w *Worker) workerCounts() map[routing.Class]int {
	if w.Service == routing.SpecGen {
		return map[routing.Class]int{
			routing.Priority: w.SpecGenPriorityWorkers, routing.Default: w.SpecGenDefaultWorkers, routing.Scheduled: w.SpecGenScheduledWorkers,
		}
	}
	return map[routing.Class]int{
		routing.Priority: w.AnalyzerPriorityWorkers, routing.Default: w.AnalyzerDefaultWorkers, routing.Scheduled: w.AnalyzerScheduledWorkers,
	}
}

func (w *Worker) validate(c *checker) {
	w.Database.validate(c)
	w.Logging.validate(c)
	w.Observability.validate(c)

	if _, err := routing.ParseService(string(w.Service)); err != nil {
		c.fail("Service", "must be analyzer or specgen")
	}

	c.intRange("AnalyzerPriorityWorkers", w.AnalyzerPriorityWorkers, 0, MaxQueueWorkers)
	c.intRange("AnalyzerDefaultWorkers", w.AnalyzerDefaultWorkers, 0, MaxQueueWorkers)
	c.intRange("AnalyzerScheduledWorkers", w.AnalyzerScheduledWorkers, 0, MaxQueueWorkers)
	c.intRange("SpecGenPriorityWorkers", w.SpecGenPriorityWorkers, 0, MaxQueueWorkers)
	c.intRange("SpecGenDefaultWorkers", w.SpecGenDefaultWorkers, 0, MaxQueueWorkers)
	c.intRange("SpecGenScheduledWorkers", w.SpecGenScheduledWorkers, 0, MaxQueueWorkers)
	if len(c.errs) == 0 && len(w.Queues()) == 0 {
		prefix := "ANALYZER"
		if w.Service == routing.SpecGen {
			prefix = "SPECGEN"
		}
		c.fail("Service", "serves no queue: set at least one of %s_QUEUE_{PRIORITY,DEFAULT,SCHEDULED}_WORKERS above 0", prefix)
	}

	c.fetch("PriorityFetchCooldown", w.PriorityFetchCooldown, "PriorityFetchPollInterval", w.PriorityFetchPollInterval)
	c.fetch("DefaultFetchCooldown", w.DefaultFetchCooldown, "DefaultFetchPollInterval", w.DefaultFetchPollInterval)
	c.fetch("ScheduledFetchCooldown", w.ScheduledFetchCooldown, "ScheduledFetchPollInterval", w.ScheduledFetchPollInterval)

	w.Jobs.validate(c)
	w.Analysis.validate(c)
}

// Analysis is where analysis jobs may look. The API (cmd/api) checks a
// target against it lexically, since it cannot see the workers' file
// system; the analyzer workers check it again after resolving symlinks and
// `..` on their host; tierctl enqueue checks it as the API does.
type Analysis struct {
	// Roots are the directories an analysis target must be (or be below):
	// ANALYSIS_ROOTS, colon-separated absolute directories, e.g.
	// /srv/repos:/data/checkouts. Each is cleaned (/srv/repos/ is
	// /srv/repos); an empty list, an empty entry, a relative entry or one
	// with a . or .. component is refused. Default "/": every directory
	// the analyzer can read.
	Roots AnalysisRoots `env:"ANALYSIS_ROOTS" envDefault:"/"`
}

func (a *Analysis) validate(c *checker) {
	// caarlos0/env gives a variable that is set but empty its default; an
	// ANALYSIS_ROOTS that an unset shell variable emptied must not quietly
	// become "/".
	if value, ok := c.vars["ANALYSIS_ROOTS"]; ok && value == "" {
		c.fail("Roots", "must not be empty: %s", analysisRootsHelp)
	}
}

// AnalysisRoots are absolute, clean directories (ANALYSIS_ROOTS parsed).
type AnalysisRoots []string

const analysisRootsHelp = "colon-separated absolute directories, e.g. /srv/repos:/data/checkouts (/ allows every directory)"

// UnmarshalText parses a colon-separated list of absolute directories.
func (r *AnalysisRoots) UnmarshalText(text []byte) error {
	var roots AnalysisRoots
	for entry := range strings.SplitSeq(string(text), ":") {
		switch {
		case entry == "":
			return errors.New("has an empty entry: " + analysisRootsHelp)
		case !filepath.IsAbs(entry):
			return fmt.Errorf("%q is not an absolute directory: %s", entry, analysisRootsHelp)
		case slices.Contains(strings.Split(entry, "/"), "..") || slices.Contains(strings.Split(entry, "/"), "."):
			return fmt.Errorf("%q has a . or .. component: name the directory itself", entry)
		}
		roots = append(roots, filepath.Clean(entry))
	}
	*r = roots
	return nil
}

// String is the roots as ANALYSIS_ROOTS lists them.
func (r AnalysisRoots) String() string { return strings.Join(r, ":") }
