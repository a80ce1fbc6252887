package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/service"
)

// lenientArgs decode leniently, as a worker wants (River retries an
// unmarshal error; a job whose args can never work should be cancelled
// instead): the error is kept for Validate. Strictness must still hold in
// DecodeArgs.
type lenientArgs struct {
	Base
	Path  string `json:"path"`
	Count int    `json:"count,omitempty"`
	Skip  string `json:"-"`
	Upper string // no tag: its Go name

	decodeErr error
}

// Base is embedded: its fields are lenientArgs' fields in JSON.
type Base struct {
	Team string `json:"team"`
}

func (lenientArgs) Kind() string { return "lenient" }

func (a *lenientArgs) UnmarshalJSON(data []byte) error {
	type plain lenientArgs
	if err := json.Unmarshal(data, (*plain)(a)); err != nil {
		a.decodeErr = err
	}
	return nil
}

func (a *lenientArgs) Validate() error { return a.decodeErr }

type lenientWorker struct {
	river.WorkerDefaults[lenientArgs]
}

func (*lenientWorker) Work(context.Context, *river.Job[lenientArgs]) error { return nil }

func TestDecodeArgsIsStrictForLenientTypes(t *testing.T) {
	t.Parallel()
	inRoot := service.Check(func(a lenientArgs) error {
		if !strings.HasPrefix(a.Path, "/srv/") {
			return errors.New("path must be under /srv")
		}
		return nil
	})
	kind := service.WorkerKind(&lenientWorker{}, inRoot)

	args, err := kind.DecodeArgs([]byte(`{"team": "payments", "path": "/srv/a", "count": 2, "Upper": "x"}`))
	require.NoError(t, err)
	require.Equal(t, lenientArgs{Base: Base{Team: "payments"}, Path: "/srv/a", Count: 2, Upper: "x"}, args)

	tests := []struct {
		name, give, want string
	}{
		{"unknown field", `{"path": "/srv/a", "tier": "pro"}`, `unknown field "tier"`},
		{"a field tagged -", `{"path": "/srv/a", "Skip": "x"}`, `unknown field "Skip"`},
		{"a key in another case", `{"PATH": "/srv/a"}`, `unknown field "PATH"`},
		{"an untagged field in another case", `{"path": "/srv/a", "UPPER": "x"}`, `unknown field "UPPER"`},
		{"the unexported error", `{"path": "/srv/a", "decodeErr": 1}`, `unknown field "decodeErr"`},
		{"wrong type, kept by UnmarshalJSON and returned by Validate", `{"path": 7}`, "cannot unmarshal number"},
		{"refused by the Check", `{"path": "/etc"}`, "path must be under /srv"},
		{"an array", `[1]`, "args must be a JSON object"},
		{"null", `null`, "args must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := kind.DecodeArgs([]byte(tt.give))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestArgsFields(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"Upper", "count", "path", "team"}, service.WorkerKind(&lenientWorker{}).ArgsFields())
	require.Equal(t, []string{"subject", "to"}, service.WorkerKind(&sendWorker{}).ArgsFields())
}

func TestArgsType(t *testing.T) {
	t.Parallel()
	require.Equal(t, reflect.TypeFor[lenientArgs](), service.WorkerKind(&lenientWorker{}).ArgsType())
	require.Nil(t, service.Kind{}.ArgsType())
}
