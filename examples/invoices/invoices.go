// Package invoices is a team's own service built on tierq's library alone,
// from docs/library.md's code: service "invoices" with two kinds in the
// queues invoices_priority, invoices_default and invoices_scheduled,
//
//   - invoice_render, which renders an invoice (or, from the daily periodic
//     job, the day's ledger), and
//   - invoice_send, which emails an invoice. An address at a domain that
//     never receives mail (the .invalid top-level domain, RFC 2606) fails
//     every attempt: the kind has 2 attempts (service.MaxAttempts) a second
//     apart (SendWorker.NextRetry), so such a job reaches tierq's dead-letter
//     table within seconds.
//
// Registry is the application's registry, the only one its worker,
// scheduler and API (cmd/invoices-*) serve: nothing of tierq's reference
// app. The module is outside tierq's and tested end to end by tierq's
// `make test` (e2e_test.go), with the stock tierctl against it.
package invoices

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// ServiceName is the service's name (WORKER_SERVICE=invoices; its variables
// are INVOICES_QUEUE_*_WORKERS), and BaseQueue its queues' prefix.
const (
	ServiceName = "invoices"
	BaseQueue   = "invoices"
)

// Kinds of the service's jobs.
const (
	KindRender = "invoice_render"
	KindSend   = "invoice_send"
)

// Timeouts of the kinds (service.Timeout): one attempt's limit.
const (
	RenderTimeout = 30 * time.Second
	SendTimeout   = 10 * time.Second
)

// SendAttempts are an invoice_send job's attempts (service.MaxAttempts), and
// SendRetryAfter the wait before each retry (SendWorker.NextRetry): a mail
// that cannot go reaches the dead-letter table a few seconds after its first
// attempt, not hours.
const (
	SendAttempts   = 2
	SendRetryAfter = time.Second
)

// Formats of a rendering.
const (
	FormatPDF    = "pdf"
	FormatHTML   = "html"
	FormatLedger = "ledger" // the day's ledger, of no invoice: the periodic job's
)

// RenderArgs are an invoice_render job's args:
//
//	{"invoice_id": 7, "format": "pdf"}
type RenderArgs struct {
	// InvoiceID is the invoice to render; 0 with FormatLedger.
	InvoiceID int64 `json:"invoice_id" river:"unique"`
	// Format is FormatPDF, FormatHTML or FormatLedger.
	Format string `json:"format" river:"unique"`
}

// Kind is the job kind.
func (RenderArgs) Kind() string { return KindRender }

// Validate refuses args that can never work (the API answers 400).
func (a *RenderArgs) Validate() error {
	switch {
	case a.Format == FormatLedger && a.InvoiceID != 0:
		return errors.New("a ledger is of no invoice: invoice_id must be 0")
	case a.Format == FormatLedger:
		return nil
	case a.Format != FormatPDF && a.Format != FormatHTML:
		return fmt.Errorf("format %q not pdf, html or ledger", a.Format)
	case a.InvoiceID <= 0:
		return fmt.Errorf("invoice_id %d must be positive", a.InvoiceID)
	}
	return nil
}

// RenderWorker renders invoices.
type RenderWorker struct {
	river.WorkerDefaults[RenderArgs]
}

var _ river.Worker[RenderArgs] = (*RenderWorker)(nil)

// Work renders the invoice: args that can never work are cancelled.
func (w *RenderWorker) Work(_ context.Context, job *river.Job[RenderArgs]) error {
	if err := job.Args.Validate(); err != nil {
		return river.JobCancel(err)
	}
	return nil // the rendering itself is the team's business
}

// SendArgs are an invoice_send job's args:
//
//	{"invoice_id": 7, "email": "billing@example.com"}
type SendArgs struct {
	InvoiceID int64  `json:"invoice_id" river:"unique"`
	Email     string `json:"email" river:"unique"`
}

// Kind is the job kind.
func (SendArgs) Kind() string { return KindSend }

// Validate refuses args that can never work (the API answers 400).
func (a *SendArgs) Validate() error {
	if a.InvoiceID <= 0 {
		return fmt.Errorf("invoice_id %d must be positive", a.InvoiceID)
	}
	if _, domain, ok := strings.Cut(a.Email, "@"); !ok || domain == "" {
		return fmt.Errorf("email %q is not an address", a.Email)
	}
	return nil
}

// Mailer sends an invoice by email.
type Mailer interface {
	Send(ctx context.Context, to string, invoiceID int64) error
}

// SendWorker emails invoices with its Mailer.
type SendWorker struct {
	river.WorkerDefaults[SendArgs]

	mailer Mailer
}

var _ river.Worker[SendArgs] = (*SendWorker)(nil)

// Work sends the invoice. A failure to send is transient: retried after
// SendRetryAfter, then dead-lettered.
func (w *SendWorker) Work(ctx context.Context, job *river.Job[SendArgs]) error {
	if err := job.Args.Validate(); err != nil {
		return river.JobCancel(err)
	}
	if err := w.mailer.Send(ctx, job.Args.Email, job.Args.InvoiceID); err != nil {
		return fmt.Errorf("send invoice %d: %w", job.Args.InvoiceID, err)
	}
	return nil
}

// NextRetry is SendRetryAfter after a failed attempt: River uses it instead
// of its default backoff (1s, 16s, 81s, ...), in the worker and in the
// leader's rescuer alike.
func (w *SendWorker) NextRetry(*river.Job[SendArgs]) time.Time {
	return time.Now().Add(SendRetryAfter)
}

// Discard is a Mailer that delivers nothing: it refuses an address at a
// domain of the .invalid top-level domain, which never receives mail, and
// accepts every other.
type Discard struct{}

// Send implements Mailer.
func (Discard) Send(_ context.Context, to string, _ int64) error {
	if strings.HasSuffix(to, ".invalid") {
		return fmt.Errorf("%s: domain does not receive mail", to)
	}
	return nil
}

// LedgerJob is the service's periodic job: once a day, and when a
// scheduler becomes leader, it queues the day's ledger (render, the
// invoice_render kind, format ledger) in invoices_scheduled, one per day
// however many schedulers start (unique by period), with the attempts
// render declares (none: the scheduler's MAX_ATTEMPTS).
func LedgerJob(render service.Kind) *river.PeriodicJob {
	const day = 24 * time.Hour
	return river.NewPeriodicJob(river.PeriodicInterval(day), func() (river.JobArgs, *river.InsertOpts) {
		opts := routing.InsertOptsFor(BaseQueue, tiers.Free, "", true) // invoices_scheduled
		opts.MaxAttempts = render.MaxAttempts()                        // 0: the client's default
		opts.UniqueOpts = river.UniqueOpts{ByArgs: true, ByPeriod: day}
		return RenderArgs{Format: FormatLedger}, opts
	}, &river.PeriodicJobOpts{ID: "invoices_ledger", RunOnStart: true})
}

// Deps are what the service's workers need. The scheduler and the API,
// which run none of them, leave them empty.
type Deps struct {
	// Mailer sends invoices. Default: Discard.
	Mailer Mailer
}

// Service is the invoices service: kinds invoice_render and invoice_send
// in invoices_priority, invoices_default and invoices_scheduled, with 2, 1
// and 1 workers per process by default, and the daily LedgerJob.
func Service(deps Deps) (*service.Service, error) {
	mailer := deps.Mailer
	if mailer == nil {
		mailer = Discard{}
	}
	render := service.WorkerKind(&RenderWorker{}, service.Timeout[RenderArgs](RenderTimeout))
	return service.New(&service.Config{
		Name:      ServiceName,
		BaseQueue: BaseQueue,
		Kinds: []service.Kind{
			render,
			service.WorkerKind(&SendWorker{mailer: mailer},
				service.Timeout[SendArgs](SendTimeout), service.MaxAttempts[SendArgs](SendAttempts)),
		},
		Workers:      &service.ClassWorkers{Priority: 2, Default: 1, Scheduled: 1},
		PeriodicJobs: []*river.PeriodicJob{LedgerJob(render)},
	})
}

// Registry is the application's registry: the invoices service, and
// nothing else. Its worker, scheduler and API serve it alone.
func Registry(deps Deps) (*service.Registry, error) {
	svc, err := Service(deps)
	if err != nil {
		return nil, err
	}
	return service.NewRegistry(svc)
}
