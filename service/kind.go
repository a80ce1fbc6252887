package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/riverqueue/river"
)

// Kind is one job kind of a service: its River worker and its args type.
// WorkerKind makes one; the zero value is not valid.
type Kind struct {
	name      string
	addWorker func(workers *river.Workers) error
	decode    func(data []byte) (river.JobArgs, error)
}

// Validator is implemented by args types that check themselves: DecodeArgs
// calls Validate after decoding, and a non-nil error refuses the args.
type Validator interface {
	Validate() error
}

// WorkerKind is the Kind of worker's args type T.
func WorkerKind[T river.JobArgs](worker river.Worker[T]) Kind {
	var zero T
	return Kind{
		name: zero.Kind(),
		addWorker: func(workers *river.Workers) error {
			return river.AddWorkerSafely(workers, worker)
		},
		decode: func(data []byte) (river.JobArgs, error) {
			var args T
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&args); err != nil {
				return nil, err
			}
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				return nil, errors.New("args must be one JSON object")
			}
			// *T has T's methods too: one check covers both receivers.
			if v, ok := any(&args).(Validator); ok {
				if err := v.Validate(); err != nil {
					return nil, err
				}
			}
			return args, nil
		},
	}
}

// Name is the kind's name (its args' Kind()).
func (k Kind) Name() string { return k.name }

// DecodeArgs decodes data strictly into the kind's args type: unknown fields,
// wrong types and trailing data are errors, and args that implement
// Validator must pass it. The result is the args value, ready to insert.
func (k Kind) DecodeArgs(data []byte) (river.JobArgs, error) {
	if k.decode == nil {
		return nil, fmt.Errorf("%w: kind not made by WorkerKind", ErrInvalid)
	}
	return k.decode(data)
}
