package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/riverqueue/river"
)

// Kind is one job kind of a service: its River worker and its args type.
// WorkerKind makes one; the zero value is not valid.
type Kind struct {
	name      string
	aliases   []string // the args' KindAliases (river.JobArgsWithKindAliases)
	argsType  reflect.Type
	fields    []string // JSON field names of the args type, sorted
	addWorker func(workers *river.Workers) error
	decode    func(data []byte) (river.JobArgs, error)
}

// Validator is implemented by args types that check themselves: DecodeArgs
// calls Validate after decoding, and a non-nil error refuses the args.
type Validator interface {
	Validate() error
}

// KindOption configures a Kind made by WorkerKind.
type KindOption[T river.JobArgs] func(*kindOptions[T])

type kindOptions[T river.JobArgs] struct {
	checks []func(args T) error
}

// Check adds a check that DecodeArgs runs on args of the kind after the
// args' own Validate: for rules that need the application's configuration
// (a directory the args must point into, say), which the args type cannot
// know.
func Check[T river.JobArgs](check func(args T) error) KindOption[T] {
	return func(o *kindOptions[T]) { o.checks = append(o.checks, check) }
}

// WorkerKind is the Kind of worker's args type T.
func WorkerKind[T river.JobArgs](worker river.Worker[T], opts ...KindOption[T]) Kind {
	var o kindOptions[T]
	for _, opt := range opts {
		opt(&o)
	}
	var zero T
	fields, isStruct := jsonFields(reflect.TypeFor[T]())
	var aliases []string
	if a, ok := any(zero).(river.JobArgsWithKindAliases); ok {
		aliases = slices.Clone(a.KindAliases())
	}
	return Kind{
		name:     zero.Kind(),
		aliases:  aliases,
		argsType: reflect.TypeFor[T](),
		fields:   slices.Sorted(maps.Keys(fields)),
		addWorker: func(workers *river.Workers) error {
			return river.AddWorkerSafely(workers, worker)
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
