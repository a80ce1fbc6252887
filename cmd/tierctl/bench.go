package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/riverqueue/river"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/tierq/tierq/bench"
	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/ctl"
	"github.com/tierq/tierq/examples/thumbnail"
	thumbnailapp "github.com/tierq/tierq/examples/thumbnail/app"
	"github.com/tierq/tierq/internal/refapp"
	"github.com/tierq/tierq/jobs"
)

// benchScenarios are tierctl bench's scenarios, in the order "all" runs them.
var benchScenarios = []string{"isolation", "throughput", "sweeps", "dlq", "insert", "fairness", "lending", "realistic", "scaleout", "tenants", "traffic", "console", "limits"}

func (a *app) benchCommand() *cobra.Command {
	var (
		quick, asJSON bool
		runs          int
		set           []string
		samples       string
	)
	cmd := &cobra.Command{
		Use:   "bench SCENARIO|all",
		Short: "Measure tierq against bare River and PostgreSQL (in a schema of its own)",
		Long: `Runs a benchmark scenario against DATABASE_URL, in a schema it creates and
drops (tierq_bench_<random>); no other table of the database is touched.

Scenarios:
  isolation   insert→start latency of paying work, with and without a 50,000-job
              free backlog, and against River's default fetch settings
  throughput  jobs/s of tierq's worker against a bare River client, and at the
              ADR's worker counts against the fetch-cadence bound
  sweeps      aging, escalation and dead-letter drain with 10k and 1M rows
  dlq         dead-letter drain and replay rates
  insert      producer inserts through the routing helper against raw River
  fairness    fair share among tenants: other tenants' latency under one
              tenant's flood (on, off, and against a snooze-based cap), shares
              when all are backlogged, and a tenant alone keeping the queue
  lending     idle priority workers lent to free work: free jobs/s with lending
              on and off, and paid latency beside the free backlog
  realistic   paid latency beside 5,000 free jobs of 200 ms: tierq against one
              queue with River priorities (ADR-16's Option B) and River's defaults
  scaleout    1, 2, 4 and 8 worker processes (this binary, re-executed): jobs/s
              against the slot and fetch-cadence bounds, fetches per second per
              process idle and busy, paid pickup beside a free backlog, CPU
  tenants     a newcomer tenant's first start beside 10 to 10,000 active tenants
              with a backlog each, and beside one flood spread over 50 tenant
              ids; what a fair-share pass costs there (docs/fairness.md)
  traffic     production traffic through the real processes (this binary,
              re-executed: workers of the reference app's services and the
              thumbnail example's, two schedulers, the API): 1,000 tenants of
              Zipf sizes, odd tenant ids, retries, failures, snoozes, bad args,
              unfetchable rows; fair share on and off alternated, then a worker
              and the leading scheduler killed midway; every job accounted for
  console     every page of the operator console (/console/) over HTTP, against
              the API served in this process, beside 1M jobs (a fifth held by
              fair share) and 100k dead letters: each page's median of 7
              requests, target 300 ms (--quick: 100k jobs, 10k dead letters)
  limits      per-tenant limits: a cap of 2 never exceeded across two worker
              processes (this binary, re-executed), a capped tenant's next
              start after its job ends, jobs started per second under a rate
              limit, throughput with caps against none and against the cap
              trigger disabled, and a per-process snooze cap as comparator

Each prints a table with every target met or not; --json adds one JSON object
as the last line. See docs/benchmarks.md.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			scenarios := []string{args[0]}
			if args[0] == "all" {
				scenarios = benchScenarios
			} else if !slices.Contains(benchScenarios, args[0]) {
				return &ctl.UsageError{Err: fmt.Errorf("unknown scenario %q (want one of %s, or all)", args[0], strings.Join(benchScenarios, ", "))}
			}
			if runs < 0 || runs > 100 {
				return &ctl.UsageError{Err: fmt.Errorf("--runs must be between 0 and 100, not %d", runs)}
			}
			// The service under test is the reference app's analyzer, in
			// the registry of both its services.
			services, err := jobs.Registry(jobs.Deps{})
			if err != nil {
				return err
			}
			analyzer, ok := services.Lookup(jobs.ServiceAnalyzer)
			if !ok {
				return fmt.Errorf("no service %s", jobs.ServiceAnalyzer)
			}
			if err := bench.CheckWorkerEnv(services, set); err != nil {
				return &ctl.UsageError{Err: err}
			}
			cfg, err := config.Load[config.CLI](a.environ)
			if err != nil {
				return err
			}
			// --set values are checked as the worker process would check
			// them, before anything is created.
			if _, err := config.LoadWorker(append([]string{"DATABASE_URL=" + cfg.URL, "WORKER_SERVICE=" + analyzer.Name()}, set...), services); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find tierctl's own executable (the scaleout scenario's worker): %w", err)
			}
			progress := &benchProgress{app: a}
			opts := bench.Options{
				DatabaseURL: cfg.URL, Quick: quick, Runs: runs, WorkerEnv: set, Progress: progress,
				Service: analyzer, Registry: services, ProducerArgs: benchAnalysis,
				WorkerCommand: benchWorker(self), AppCommand: benchApp(self),
			}
			// The traffic scenario runs the reference app's services and
			// the thumbnail example's at once, as the example's scheduler
			// and API do.
			withThumbnails, err := thumbnail.WithReference(jobs.Deps{})
			if err != nil {
				return err
			}
			report := bench.Report{}
			var runErr error
			for _, s := range scenarios {
				scenarioOpts := opts
				if s == "traffic" {
					scenarioOpts.Registry = withThumbnails
				}
				if runErr = bench.Run(cmd.Context(), s, scenarioOpts, &report); runErr != nil {
					break
				}
			}
			progress.finish()         // nothing draws after this: the JSON stays the last line
			a.printBenchTable(report) // what finished, even when a scenario failed
			if report.Scaleout != nil {
				fmt.Fprintln(a.stdout)
				a.printTable(report.Scaleout.Table())
			}
			if report.Tenants != nil {
				fmt.Fprintln(a.stdout)
				a.printTable(report.Tenants.Table())
			}
			if report.Traffic != nil {
				fmt.Fprintln(a.stdout)
				a.printTable(report.Traffic.Table())
			}
			if runErr != nil {
				return runErr
			}
			if samples != "" && (report.Isolation != nil || report.Fairness != nil || report.Lending != nil || report.Realistic != nil || report.Scaleout != nil) {
				all := map[string][]float64{}
				if report.Isolation != nil {
					maps.Copy(all, report.Isolation.Samples)
				}
				if report.Fairness != nil {
					maps.Copy(all, report.Fairness.Samples) // its phases are named "fairness …"
				}
				if report.Lending != nil {
					maps.Copy(all, report.Lending.Samples) // "lending …"
				}
				if report.Realistic != nil {
					maps.Copy(all, report.Realistic.Samples) // "realistic …"
				}
				if report.Scaleout != nil {
					maps.Copy(all, report.Scaleout.Samples) // "scaleout …"
				}
				if err := writeSamples(samples, all); err != nil {
					return err
				}
			}
			if asJSON {
				line, err := json.Marshal(report)
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, string(line))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&quick, "quick", false, "small runs: about a minute per scenario")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object with every result as the last line")
	cmd.Flags().IntVar(&runs, "runs", 0, "repetitions per scenario, results are medians (0: 3, or 1 with --quick)")
	cmd.Flags().StringVar(&samples, "samples", "", "write the latencies of the isolation, fairness, lending, realistic and scaleout scenarios (last run, ms per job and phase; fairness per small tenant, lending, realistic and scaleout the paid jobs) to this CSV file, for scripts/plot-latency.sh")
	cmd.Flags().StringArrayVar(&set, "set", nil, "NAME=value for tierq's worker configuration (e.g. QUEUE_PRIORITY_FETCH_COOLDOWN=10ms), to measure other tuning")
	return cmd
}

// benchWorkerUse is the hidden command that runs one worker process of the
// scaleout scenario.
const benchWorkerUse = "bench-worker"

// benchWorkerCommand is the worker process tierctl bench scaleout starts,
// up to 8 at a time, and tierctl bench limits two: one worker deployment of the reference app, exactly as
// cmd/worker runs it (refapp.RunWorker: worker.Run), configured by the
// environment alone (the bench sets DATABASE_URL, DATABASE_SCHEMA,
// WORKER_SERVICE, LOAD_TEST_WORKLOAD=true, …). Hidden: it is the bench's,
// so that the bench needs no other binary; operators run cmd/worker.
func (a *app) benchWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    benchWorkerUse,
		Short:  "Run one worker deployment of the reference app (tierctl bench scaleout's and limits' worker process)",
		Hidden: true,
		Args:   usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return refapp.RunWorker(cmd.Context(), a.environ, a.stdout)
		},
	}
}

// benchWorker is bench.Options.WorkerCommand for tierctl: the executable
// self (tierctl) running its hidden bench-worker command with exactly the
// bench's environment.
func benchWorker(self string) func(environ []string) *exec.Cmd {
	return func(environ []string) *exec.Cmd {
		cmd := exec.Command(self, benchWorkerUse) //nolint:gosec // tierctl itself
		cmd.Env = environ
		return cmd
	}
}

// benchProcessUse is the hidden command that runs one process of the
// traffic scenario's application.
const benchProcessUse = "bench-process"

// benchProcessCommand is a process tierctl bench traffic starts: a worker
// deployment (the reference app's, as cmd/worker runs it, or the thumbnail
// example's for WORKER_SERVICE=thumbnailer, as thumbnail-worker runs it), a
// scheduler replica or the API of the reference app's services and the
// thumbnail example's (as thumbnail-scheduler and thumbnail-api run them),
// configured by the environment alone. Hidden: it is the bench's.
func (a *app) benchProcessCommand() *cobra.Command {
	return &cobra.Command{
		Use:    benchProcessUse + " worker|scheduler|api",
		Short:  "Run one process of the traffic scenario's application (tierctl bench traffic's processes)",
		Hidden: true,
		Args:   usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch bench.Role(args[0]) {
			case bench.RoleWorker:
				if slices.Contains(a.environ, "WORKER_SERVICE="+thumbnail.ServiceName) {
					// The traffic is the load-test workload: the source
					// and output directories are never read.
					dirs := []string{"THUMBNAIL_SOURCE_DIR=" + os.TempDir(), "THUMBNAIL_OUTPUT_DIR=" + os.TempDir()}
					return thumbnailapp.RunWorker(cmd.Context(), append(dirs, a.environ...), a.stdout)
				}
				return refapp.RunWorker(cmd.Context(), a.environ, a.stdout)
			case bench.RoleScheduler:
				return thumbnailapp.RunSchedulerWithReference(cmd.Context(), a.environ, a.stdout)
			case bench.RoleAPI:
				return thumbnailapp.RunAPIWithReference(cmd.Context(), a.environ, a.stdout)
			}
			return &ctl.UsageError{Err: fmt.Errorf("unknown role %q (want worker, scheduler or api)", args[0])}
		},
	}
}

// benchApp is bench.Options.AppCommand for tierctl: the executable self
// running its hidden bench-process command with exactly the bench's
// environment.
func benchApp(self string) func(role bench.Role, environ []string) *exec.Cmd {
	return func(role bench.Role, environ []string) *exec.Cmd {
		cmd := exec.Command(self, benchProcessUse, string(role)) //nolint:gosec // tierctl itself
		cmd.Env = environ
		return cmd
	}
}

// printTable prints rows (the first a header) in aligned columns.
func (a *app) printTable(rows [][]string) {
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	_ = w.Flush()
}

// benchAnalysis is the i-th analysis of run that the insert scenario
// inserts through producer.Insert: target /bench/<run>/<i>, for user bench
// (producer.Insert fills in the tier).
func benchAnalysis(run, i int) river.JobArgs {
	return jobs.AnalysisArgs{Target: fmt.Sprintf("/bench/%d/%d", run, i), UserID: "bench"}
}

// benchProgress draws one progress bar per stage.
type benchProgress struct {
	app *app
	bar *progressbar.ProgressBar
}

func (p *benchProgress) Stage(name string, total int) {
	p.finish()
	if total <= 0 {
		total = -1 // a spinner
	}
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(p.app.stdout),
		progressbar.OptionSetDescription(name),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(time.Second), // few lines when stdout is a file
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.app.stdout) }),
	)
}

// finish ends the current bar (a spinner's redraws too).
func (p *benchProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		_ = p.bar.Exit()
		p.bar = nil
	}
}

func (p *benchProgress) Add(n int) {
	if p.bar != nil {
		_ = p.bar.Add(n)
	}
}

func (a *app) printBenchTable(r bench.Report) {
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nSCENARIO\tMEASURE\tVALUE\tTARGET\tMET")
	for _, row := range r.Rows() {
		met := ""
		if row.Target != "" {
			met = "no"
			if row.Met {
				met = "yes"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", row.Scenario, row.Measure, row.Value, row.Target, met)
	}
	_ = w.Flush()
}

// writeSamples writes latencies as CSV: phase,latency_ms.
func writeSamples(path string, samples map[string][]float64) error {
	f, err := os.Create(path) //nolint:gosec // the operator's own output file
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"phase", "latency_ms"})
	phases := slices.Sorted(maps.Keys(samples))
	for _, phase := range phases {
		for _, v := range samples[phase] {
			_ = w.Write([]string{phase, strconv.FormatFloat(v, 'f', 3, 64)})
		}
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
