package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Kind is one job kind of a service: its River worker, its args type, and
// what the kind declares for every job of it: its timeout (Timeout) and,
// optionally, its attempts (MaxAttempts). WorkerKind makes one; the zero
// value is not valid.
type Kind struct {
	name        string
	aliases     []string // the args' KindAliases (river.JobArgsWithKindAliases)
	argsType    reflect.Type
	fields      []string // JSON field names of the args type, sorted
	timeout     time.Duration
	maxAttempts int   // 0: not declared
	err         error // a bad option given to WorkerKind
	addWorker   func(workers *river.Workers) error
	decode      func(data []byte) (river.JobArgs, error)
}

// DefaultTimeout is the timeout of a kind that declares none (Timeout):
// River's own default job timeout (river.JobTimeoutDefault), one minute.
const DefaultTimeout = time.Minute

// MaxMaxAttempts is the most attempts a kind may declare (MaxAttempts), as
// MAX_ATTEMPTS allows (config.Jobs).
const MaxMaxAttempts = 1000

// Validator is implemented by args types that check themselves: DecodeArgs
// calls Validate after decoding, and a non-nil error refuses the args.
type Validator interface {
	Validate() error
}

// KindOption configures a Kind made by WorkerKind.
type KindOption[T river.JobArgs] func(*kindOptions[T])

type kindOptions[T river.JobArgs] struct {
	checks      []func(args T) error
	timeout     time.Duration
	timeoutSet  bool
	maxAttempts int
	attemptsSet bool
}

// Timeout declares how long one attempt of a job of the kind may run
// before River cancels its context. It is the kind's, not the worker's:
// WorkerKind registers the worker so that River applies exactly d to every
// job of the kind, in the worker process that runs it (its context's
// deadline) and in the leader's rescuer (which leaves a running job alone
// until it is older than d) alike, and the scheduler checks
// RESCUE_STUCK_JOBS_AFTER against it (Registry.Timeouts), so the two can
// never disagree. The worker's own Timeout method, if it has one, is not
// called for jobs: WorkerKind calls it once, with a zero job, and refuses
// the kind when it returns a timeout other than 0 (River's "the client's
// default", which river.WorkerDefaults returns) and other than the
// kind's, so that a worker whose method set its timeout (5 minutes, say)
// does not lose it silently to DefaultTimeout: declare it here instead. A
// method that panics on a zero job (it reads the args) is taken as a
// timeout per job, unknown, and not refused.
//
// d must be positive: River's -1 (no timeout) would leave a job whose
// worker died running for ever, never rescued; service.New refuses the
// kind otherwise (ErrInvalid).
//
// Default: DefaultTimeout (one minute).
func Timeout[T river.JobArgs](d time.Duration) KindOption[T] {
	return func(o *kindOptions[T]) { o.timeout, o.timeoutSet = d, true }
}

// MaxAttempts declares how many times a job of the kind is tried before
// River discards it (and tierq's drain makes it a dead letter): the
// max_attempts of every job of the kind tierq inserts (producer.Insert,
// the API's POST /v1/jobs, Service.KindInsertOpts) unless the inserter sets
// its own. One to MaxMaxAttempts; service.New refuses the kind otherwise
// (ErrInvalid).
//
// Default: none, and the inserting process's default applies: MAX_ATTEMPTS
// in tierq's API and workers, and producer.DefaultMaxAttempts (10) in a
// client made with producer.ClientConfig.
func MaxAttempts[T river.JobArgs](n int) KindOption[T] {
	return func(o *kindOptions[T]) { o.maxAttempts, o.attemptsSet = n, true }
}

// timeoutWorker is a kind's worker as WorkerKind registers it: River calls
// Timeout for every job, in the worker and in the rescuer, and gets the
// kind's timeout; everything else is the worker's own.
type timeoutWorker[T river.JobArgs] struct {
	river.Worker[T]
	timeout time.Duration
}

// Timeout is the kind's timeout, whatever the job.
func (w *timeoutWorker[T]) Timeout(*river.Job[T]) time.Duration { return w.timeout }

// Check adds a check that DecodeArgs runs on args of the kind after the
// args' own Validate: for rules that need the application's configuration
// (a directory the args must point into, say), which the args type cannot
// know.
func Check[T river.JobArgs](check func(args T) error) KindOption[T] {
	return func(o *kindOptions[T]) { o.checks = append(o.checks, check) }
}

// WorkerKind is the Kind of worker's args type T, with the options given
// (Timeout, MaxAttempts, Check). The kind's worker is registered (by
// Service.AddWorkers, Registry.AddWorkers or Kind.AddWorker) with the
// kind's timeout: see Timeout. A bad option, or a Timeout method of the
// worker that the kind's timeout would silently override (see Timeout),
// makes the kind invalid: service.New, Kind.AddWorker and Kind.Err report
// it.
func WorkerKind[T river.JobArgs](worker river.Worker[T], opts ...KindOption[T]) Kind {
	o := kindOptions[T]{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	var zero T
	var problems []string
	if o.timeoutSet && o.timeout <= 0 {
		problems = append(problems, fmt.Sprintf("timeout %s must be positive (a kind without one, -1, is never rescued when its worker dies)", o.timeout))
	}
	if own, ok := workerTimeout(worker); ok && own != 0 && own != o.timeout {
		declared := "its declared timeout"
		if !o.timeoutSet {
			declared = "the default, service.DefaultTimeout"
		}
		problems = append(problems, fmt.Sprintf("its worker's Timeout method returns %s, but the kind's timeout is %s (%s), which River applies instead: declare the worker's with service.Timeout[%s](%s) in WorkerKind (and drop the method)",
			own, o.timeout, declared, reflect.TypeFor[T]().String(), own))
	}
	if o.attemptsSet && (o.maxAttempts < 1 || o.maxAttempts > MaxMaxAttempts) {
		problems = append(problems, fmt.Sprintf("max attempts %d not in 1..%d", o.maxAttempts, MaxMaxAttempts))
	}
	var kindErr error
	if len(problems) > 0 {
		kindErr = fmt.Errorf("%w: kind %q: %s", ErrInvalid, zero.Kind(), strings.Join(problems, "; "))
	}
	fields, isStruct := jsonFields(reflect.TypeFor[T]())
	var aliases []string
	if a, ok := any(zero).(river.JobArgsWithKindAliases); ok {
		aliases = slices.Clone(a.KindAliases())
	}
	return Kind{
		name:        zero.Kind(),
		aliases:     aliases,
		argsType:    reflect.TypeFor[T](),
		fields:      slices.Sorted(maps.Keys(fields)),
		timeout:     o.timeout,
		maxAttempts: o.maxAttempts,
		err:         kindErr,
		addWorker: func(workers *river.Workers) error {
			return river.AddWorkerSafely[T](workers, &timeoutWorker[T]{Worker: worker, timeout: o.timeout})
		},
		decode: func(data []byte) (river.JobArgs, error) {
			// Unknown fields are found by name rather than with
			// json.Decoder.DisallowUnknownFields, which an args type with
			// its own UnmarshalJSON (lenient for the worker's sake) would
			// bypass.
			var object map[string]json.RawMessage
			if err := json.Unmarshal(data, &object); err != nil || object == nil {
				return nil, errors.New("args must be a JSON object")
			}
			if isStruct {
				for key := range object {
					if !fields[key] {
						return nil, fmt.Errorf("unknown field %q", key)
					}
				}
			}
			var args T
			if err := json.Unmarshal(data, &args); err != nil {
				return nil, err
			}
			// *T has T's methods too: one check covers both receivers.
			if v, ok := any(&args).(Validator); ok {
				if err := v.Validate(); err != nil {
					return nil, err
				}
			}
			for _, check := range o.checks {
				if err := check(args); err != nil {
					return nil, err
				}
			}
			return args, nil
		},
	}
}

// workerTimeout is what worker's Timeout method returns for a zero job
// (a JobRow with every field zero, zero args), and false when it panics
// (a timeout that depends on the job).
func workerTimeout[T river.JobArgs](worker river.Worker[T]) (d time.Duration, ok bool) {
	defer func() {
		if recover() != nil {
			d, ok = 0, false
		}
	}()
	return worker.Timeout(&river.Job[T]{JobRow: &rivertype.JobRow{}}), true
}

// jsonFields are the JSON names of struct type t's fields, embedded
// structs' included, and whether t is a struct at all. A request's key must
// match a name exactly: encoding/json would also take a key in another
// case, which a strict API refuses.
func jsonFields(t reflect.Type) (map[string]bool, bool) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	names := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-":
		case f.Anonymous && tag == "":
			if inner, ok := jsonFields(f.Type); ok {
				for n := range inner {
					names[n] = true
				}
			}
		case !f.IsExported():
		case tag != "":
			names[tag] = true
		default:
			names[f.Name] = true
		}
	}
	return names, true
}

// Name is the kind's name (its args' Kind()).
func (k Kind) Name() string { return k.name }

// Timeout is how long one attempt of a job of the kind may run: the
// kind's Timeout option, or DefaultTimeout. River applies it to every job
// of the kind, in the worker and in the rescuer alike.
func (k Kind) Timeout() time.Duration { return k.timeout }

// MaxAttempts is the kind's MaxAttempts option, or 0 when it declares
// none (the inserting process's default applies).
func (k Kind) MaxAttempts() int { return k.maxAttempts }

// Err is why the kind is invalid (a bad option given to WorkerKind, or a
// Kind not made by WorkerKind), matching ErrInvalid; nil for a valid kind.
func (k Kind) Err() error {
	if k.addWorker == nil {
		return fmt.Errorf("%w: kind not made by WorkerKind", ErrInvalid)
	}
	return k.err
}

// AddWorker registers the kind's worker in workers, with the kind's
// timeout, for a River client that works (or, on the leader, rescues) the
// kind outside any service: the scheduler's own kinds, or a load-test
// kind (scheduler.Config.ExtraKinds). It fails for an invalid kind (Err) and for a
// kind already registered.
func (k Kind) AddWorker(workers *river.Workers) error {
	if err := k.Err(); err != nil {
		return err
	}
	return k.addWorker(workers)
}

// FetchedNames are the kind names River fetches for the kind's worker: its
// name, then its args' KindAliases (river.JobArgsWithKindAliases), which
// River registers and, with FetchOnlyKnownKinds, fetches too.
func (k Kind) FetchedNames() []string { return append([]string{k.name}, k.aliases...) }

// ArgsType is the kind's args type, the T of WorkerKind: the type DecodeArgs
// decodes into, for a description of the args that follows the type (the
// API's OpenAPI document generates the schema of a kind's args from it).
// Nil for a Kind not made by WorkerKind.
func (k Kind) ArgsType() reflect.Type { return k.argsType }

// ArgsFields are the JSON field names of the kind's args type, sorted: the
// keys DecodeArgs accepts (none when the type is not a struct).
func (k Kind) ArgsFields() []string { return slices.Clone(k.fields) }

// DecodeArgs decodes data, which must be a JSON object, into the kind's args
// type, strictly: a field the type does not have (or a key in another case
// than the field's JSON name), a value of the wrong
// type or trailing data is an error, and so is a refusal by the args'
// Validate or by a Check given to WorkerKind. The result is the args value,
// ready to insert.
func (k Kind) DecodeArgs(data []byte) (river.JobArgs, error) {
	if k.decode == nil {
		return nil, fmt.Errorf("%w: kind not made by WorkerKind", ErrInvalid)
	}
	return k.decode(data)
}
